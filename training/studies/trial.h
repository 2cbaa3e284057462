// One sweep trial: W warm-up and M measured training steps at one batch size and setting, on
// synthetic batches that live on the device (a trial measures the training step, not the input
// pipeline). The child side of the process boundary: `train sweep` (sweep.h) starts
// `train sweep-trial`, whose entry point is child_trial_main.
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
  // Peaks over the measured steps alone, after the warm-up: what a long run settles at (equal to
  // the peaks above when there is no warm-up step). These four are figures of the measured steps:
  // nullopt where no measured step completed (a trial out of memory in its warm-up or its first
  // measured step), null in sweep.json and trials/NNN.json, an empty cell in sweep.csv.
  std::optional<int64_t> steady_peak_allocated_bytes;
  std::optional<int64_t> steady_peak_reserved_bytes;
  std::optional<double> median_step_seconds;
  std::optional<double> images_per_second;
  int64_t steps = 0;  // steps completed
  // Measured steps that replayed a CUDA graph (training.cuda_graph); 0 for an eager trial. A
  // graphed trial whose capture failed under `auto` measures eager steps and says so here.
  int64_t replayed_steps = 0;
  // CUDA: device memory in use outside the caching allocator at the end (the CUDA context,
  // cuBLAS/cuDNN handles and workspaces; other processes on the GPU count too). 0 on the CPU.
  int64_t outside_allocator_bytes = 0;
  // checkpointing auto: the blocks the trial chose to recompute ([]: none) and the peak it
  // predicted (0: blocks given by hand). nullopt where none was chosen: not auto, or the trial
  // never came to run a step (its choice ran out of memory); null in sweep.json, both of them.
  std::optional<std::vector<std::string>> recomputed_blocks;
  int64_t predicted_peak_bytes = 0;
  // Where it ran: the host (Slurm's node name in a job), and the Slurm job and array index when
  // it ran as a task of the sweep's job array ("" and -1 otherwise).
  std::string host;
  std::string job_id;
  int64_t array_index = -1;
};

nlohmann::ordered_json to_json(const TrialResult& result);
TrialResult trial_from_json(const nlohmann::json& json);

// Measures, in this process, the trial described by `config` (training.batch_size, precision,
// memory_format, checkpointing, memory.limit, device) for warmup + measure steps. Out of memory
// (device.h's is_out_of_memory) is a result (OutOfMemory), not an exception; other failures give
// Error. A trial of one step in all (warm-up 0, measure 1) gets one warm-up step: a first step
// alone never holds the optimizer's momentum while it runs forward and backward.
TrialResult measure_trial(const Config& config, int64_t warmup_steps, int64_t measure_steps);

// The splits a trial holds on `device` as training does: with data.device_resident on CUDA, the
// run's training and test split sizes, counted from data.root (data::split_size: DataError where
// the data is missing, which check_sweep refuses before a sweep starts); else 0 and 0.
data::SplitSizes resident_splits(const Config& config, const torch::Device& device);

// `train sweep-trial`: measures the trial in `config_path` and writes its result to
// `result_path` (atomically). Returns kExitOk, kExitOutOfMemory or kExitInternalError.
int child_trial_main(const std::string& config_path, const std::string& result_path);

}  // namespace training
