// What `train` is asked: the config and its overrides, the run directory, a run to resume. Both the
// command (train_command.h) and what a resume starts from (resume.h) read it.
#pragma once

#include <string>
#include <vector>

#include "training/config/config.h"

namespace training {

struct TrainRequest {
  std::string config_path;          // --config (optional when resuming)
  std::vector<Override> overrides;  // --set and the shorthand flags (--device, ...), in order
  std::string output_dir;           // --output-dir: the run directory itself
  std::string resume;               // --resume: a run directory or a checkpoint file
  bool print_config = false;        // print the effective config and exit
};

}  // namespace training
