// One sweep trial: W warm-up and M measured training steps at one batch size and setting, on
// synthetic batches that live on the device (a trial measures the training step, not the input
// pipeline). Runs inside the child process that `train sweep` starts for it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "training/config.h"

namespace training {

struct TrialResult {
  std::string status = "error";  // ok | oom | error
  std::string message;           // why, for oom and error
  // Peaks over every step, the first included: what must fit (the first step also holds cuDNN's
  // one-time autotuning workspaces, the optimizer state's creation, ...).
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;  // CUDA; equals allocated on the CPU
  // Peaks over the measured steps alone, after the warm-up: what a long run settles at (equal to
  // the peaks above when there is no warm-up step).
  int64_t steady_peak_allocated_bytes = 0;
  int64_t steady_peak_reserved_bytes = 0;
  double median_step_seconds = 0;
  double images_per_second = 0;
  int64_t steps = 0;  // steps completed
};

nlohmann::ordered_json to_json(const TrialResult& result);
TrialResult trial_from_json(const nlohmann::json& json);

// Runs the trial described by `config` (training.batch_size, precision, memory_format,
// checkpointing, memory.limit, device) for warmup + measure steps. Out of memory (device.h's
// is_out_of_memory) is a result (status oom), not an exception; other failures give status error.
TrialResult run_trial(const Config& config, int64_t warmup_steps, int64_t measure_steps);

}  // namespace training
