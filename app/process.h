// The process around a command: its set-up once the arguments are valid, and the one mapping
// of every error to its one-line message and exit code (training/platform/errors.h's table).
#pragma once

#include <functional>

namespace app {

// Logging, LibTorch's log level, SIGXFSZ ignored, the CPU memory accounting.
void set_up_process();

// Runs `action`, mapping every error to its one-line message and exit code.
int guarded(const std::function<int()>& action);

}  // namespace app
