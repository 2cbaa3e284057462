// A graceful stop: the first SIGINT/SIGTERM asks the trainer to finish the current step, write
// a checkpoint and exit; a second one kills the process as usual.
#pragma once

namespace training {

void install_stop_handlers();
bool stop_requested();
void request_stop();  // what the handler does; also lets tests trigger a stop
void clear_stop_request();

}  // namespace training
