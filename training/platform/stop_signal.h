// A graceful stop: the first SIGINT/SIGTERM asks the trainer to finish the current step, write
// a checkpoint and exit; a second one kills the process as usual.
#pragma once

namespace training {

// Before a command can stop gracefully: SIGINT/SIGTERM exit at once with kExitStopped (130), the
// code a stop has everywhere. Nothing is lost: atomic writes leave whole files or temporaries.
void install_exit_on_stop();
// The graceful stop (the flag below), for loops that check it.
void install_stop_handlers();
bool stop_requested();
void request_stop();  // what the handler does; also lets tests trigger a stop
void clear_stop_request();

}  // namespace training
