// One sweep trial, the child side of `train sweep` (child_trial_main): W warm-up and M measured
// training steps at one batch size and setting, on synthetic batches (it measures the training
// step, not the input pipeline).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "training/config/config.h"
#include "training/platform/json_rows.h"

namespace training {

enum class TrialStatus { Ok, OutOfMemory, Error };

// "ok", "oom", "error": the spelling in sweep.json and sweep.csv.
const char* status_name(TrialStatus status);

struct TrialResult {
  TrialStatus status = TrialStatus::Error;
  std::string message;  // why, for OutOfMemory and Error
  // Peaks over every step, the first included: what must fit (the first step also holds cuDNN's
  // one-time autotuning workspaces, the optimizer state's creation, ...).
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;  // CUDA; equals allocated on the CPU
  // Peaks over the measured steps alone, after the warm-up: what a long run settles at. These four
  // are nullopt (null in the JSON, empty in sweep.csv) where no measured step completed.
  std::optional<int64_t> steady_peak_allocated_bytes;
  std::optional<int64_t> steady_peak_reserved_bytes;
  std::optional<double> median_step_seconds;
  std::optional<double> images_per_second;
  int64_t steps = 0;  // steps completed
  // Measured steps that replayed a CUDA graph (0: eager, also where `auto`'s capture failed).
  int64_t replayed_steps = 0;
  // CUDA: device memory in use outside the caching allocator at the end (the CUDA context,
  // cuBLAS/cuDNN handles and workspaces; other processes on the GPU count too). 0 on the CPU.
  int64_t outside_allocator_bytes = 0;
  // checkpointing auto: the blocks the trial chose ([]: none) and the peak it predicted (0: blocks
  // given by hand); nullopt (both null in sweep.json) where none was chosen.
  std::optional<std::vector<std::string>> recomputed_blocks;
  int64_t predicted_peak_bytes = 0;
  // Where it ran: the host (Slurm's node name), and as a Slurm array task its job and index.
  std::string host;
  std::string job_id;
  int64_t array_index = -1;
};

nlohmann::ordered_json to_json(const TrialResult& result);
TrialResult trial_from_json(const nlohmann::json& json);

// Measures, in this process, the trial `config` describes for warmup + measure steps; out of
// memory and other failures are results, not exceptions. A trial of one step gets a warm-up step:
// a first step alone never holds the optimizer's momentum.
TrialResult measure_trial(const Config& config, int64_t warmup_steps, int64_t measure_steps);

// The splits a trial holds on `device` as training does: with data.device_resident on CUDA, both
// split sizes, counted (DataError where the data is missing); else 0 and 0.
data::SplitSizes resident_splits(const Config& config, const torch::Device& device);

// `train sweep-trial`: measures the trial in `config_path`, its result written to `result_path`.
int child_trial_main(const std::string& config_path, const std::string& result_path);

}  // namespace training
