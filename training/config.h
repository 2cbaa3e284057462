// The one typed configuration of a run. YAML file -> --set overrides -> Config, validated here
// and nowhere else; every config error message is written in config.cpp.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"
#include "models/resnet.h"
#include "training/errors.h"
#include "training/optim.h"
#include "training/schedule.h"

namespace training {

struct DataConfig {
  data::DataOptions dataset;    // source, root, limits, synthetic sizes
  bool augment = true;          // random crop (4-pixel padding) + horizontal flip when training
  bool device_resident = false; // keep the uint8 training set on the training device
  int64_t prefetch = 2;         // batches prepared ahead by a background thread (0 = inline)
};

struct TrainingConfig {
  std::string device = "auto";  // auto | cpu | cuda | cuda:<index>
  int64_t epochs = 30;
  int64_t max_steps = 0;  // stop after this many optimizer steps (0 = run all epochs)
  int64_t batch_size = 128;
  int64_t eval_batch_size = 500;
  int64_t seed = 0;
  double label_smoothing = 0.0;
  int64_t log_every_steps = 50;  // progress line / running-loss read-back interval
  int64_t threads = 0;           // CPU intra-op threads (0 = LibTorch's default)
};

struct CheckpointConfig {
  bool enabled = true;  // write <run>/checkpoint.pt after every epoch and at the end
};

struct OutputConfig {
  std::string dir = "runs";  // parent of run directories
  std::string name;          // run directory name; empty = <date>-<time>-<arch>
};

struct Config {
  models::ResNetOptions model;
  DataConfig data;
  TrainingConfig training;
  OptimizerOptions optimizer;
  ScheduleOptions schedule;
  CheckpointConfig checkpoint;
  OutputConfig output;
};

// A config problem: the message names the file (or --set), the key, and what was expected.
class ConfigError : public UserError {
 public:
  using UserError::UserError;
};

// Reads `path` (YAML), applies `overrides` ("key.path=value", value parsed as YAML) and
// validates. Keys absent from the file keep their defaults.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Same, from YAML text; `origin` names the source in error messages.
Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});

// The effective config as YAML (every key, defaults included); parse_config() reads it back
// to an equal Config.
std::string to_yaml(const Config& config);

// Every valid key as "section.key".
std::vector<std::string> config_keys();

// "resnet50" etc., as written in the config.
std::string arch_name(const models::ResNetOptions& model);

}  // namespace training
