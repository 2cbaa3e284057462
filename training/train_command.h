// One training run from start to finish: config, device, data, run directory, trainer. The app's
// `train` command is a thin wrapper around train_command().
#pragma once

#include <string>
#include <vector>

#include "training/config/config.h"
#include "training/platform/errors.h"

namespace training {

struct TrainRequest {
  std::string config_path;          // --config (optional when resuming)
  std::vector<Override> overrides;  // --set and the shorthand flags (--device, ...), in order
  std::string output_dir;           // --output-dir: the run directory itself
  std::string resume;               // --resume: a run directory or a checkpoint file
  bool print_config = false;        // print the effective config and exit
};

// Returns kExitOk or kExitStopped (errors.h). Throws ConfigError / UserError / data::DataError for
// problems the user can fix, and OutOfMemory when training runs out of (emulated) device memory.
int train_command(const TrainRequest& request);

}  // namespace training
