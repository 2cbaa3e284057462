// One training run from start to finish: config, device, data, run directory, trainer. The app's
// `train` command is a thin wrapper around train_command().
#pragma once

#include "training/platform/errors.h"
#include "training/train_request.h"

namespace training {

// Returns kExitOk or kExitStopped (errors.h). Throws ConfigError / UserError / data::DataError for
// problems the user can fix, and OutOfMemory when training runs out of (emulated) device memory.
int train_command(const TrainRequest& request);

}  // namespace training
