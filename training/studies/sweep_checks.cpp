// What train sweep refuses before its folder exists: the grid's cells this device cannot run, and
// the keys a sweep does not combine (sweep.h's check_sweep).
#include <torch/cuda.h>

#include <algorithm>

#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/parts/setup.h"
#include "training/platform/device.h"
#include "training/platform/distributed.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/studies/sweep.h"
#include "training/studies/trial.h"

namespace training {

namespace {

// sweep.devices: GPUs of this machine, and only for a sweep on CUDA.
void check_sweep_devices(const std::vector<int64_t>& devices, const torch::Device& device) {
  if (!device.is_cuda()) {
    throw KeyError("sweep.devices",
                   "one trial per GPU is for a sweep on CUDA; on the CPU trials run one at a "
                   "time (their timings would disturb each other): drop sweep.devices (--gpus)");
  }
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  for (int64_t index : devices) {
    if (index >= count) {
      throw KeyError("sweep.devices", "GPU " + std::to_string(index) + " is not on this machine (" +
                                          std::to_string(count) + " GPU(s): 0 to " +
                                          std::to_string(count - 1) + ")");
    }
  }
}

// Every trial would run out of memory (exit 3): refused where no precision of the grid fits (what
// the run holds whatever the batch differs between them), with the first one's line. In
// checkpointing's `mode` (the config's own is no cell's: each takes sweep.checkpointing's).
void refuse_what_no_trial_fits(const Config& config, const torch::Device& device,
                               CheckpointMode mode) {
  std::vector<Config> trials;
  for (const Precision precision : config.sweep.precisions) {
    trials.push_back(config);
    trials.back().training.precision = precision;
    trials.back().checkpointing.mode(mode).blocks(std::nullopt);  // each trial chooses its own
  }
  refuse_unless_one_fits(trials, device, "--precisions fp32");
}

}  // namespace

void check_sweep(const Config& config, const torch::Device& device) {
  for (auto precision : config.sweep.precisions) {
    if (precision == Precision::BF16) check_bf16_supported(device, "sweep.precisions");
  }
  as_key("memory.limit", [&] { check_memory_limit(device, config.memory.limit); });
  if (config.memory.snapshot) {
    throw KeyError("memory.snapshot",
                   "true is not recorded by a sweep's trials (they keep no allocator history); "
                   "set it to false, and record one setting's step with train memory "
                   "--set memory.snapshot=true (CUDA) or a card's with train memory --card NAME "
                   "--snapshot FILE");
  }
  refuse_what_no_trial_fits(config, device, CheckpointMode::Off);
  // WORLD_SIZE alone: the rest of a launch (RANK, MASTER_PORT) is not asked for a sweep.
  if (const int64_t world_size = world_size_from_environment(); world_size > 1) {
    throw UserError("WORLD_SIZE=" + std::to_string(world_size) +
                    ": train sweep runs its trials one process at a time; start it without "
                    "WORLD_SIZE, and set sweep.data_parallel: true to measure what one rank of a "
                    "data-parallel run holds");
  }
  if (config.training.accumulate_steps != 1) {
    throw KeyError("training.accumulate_steps",
                   std::to_string(config.training.accumulate_steps) +
                       " is not what train sweep measures: its grid's axis is "
                       "sweep.accumulate_steps (--accumulate-steps " +
                       std::to_string(config.training.accumulate_steps) + ")");
  }
  if (config.sweep.data_parallel) check_group_backend(config.distributed, device);
  if (config.sweep.data_parallel && config.training.cuda_graph == CudaGraphMode::On) {
    throw KeyError("sweep.data_parallel",
                   "true is not combined with training.cuda_graph: on (a data-parallel step is "
                   "not captured); set training.cuda_graph to auto or off");
  }
  if (config.training.cuda_graph == CudaGraphMode::On) {
    use_cuda_graph(config, device, /*data_parallel=*/false);  // refuses the CPU
    const auto& p = config.sweep.precisions;
    const auto& c = config.sweep.checkpointing;
    const auto& n = config.sweep.accumulate_steps;
    if (std::find(p.begin(), p.end(), Precision::FP16) != p.end() ||
        std::find_if(c.begin(), c.end(), [](auto mode) { return mode != CheckpointMode::Off; }) !=
            c.end() ||
        std::find_if(n.begin(), n.end(), [](int64_t steps) { return steps > 1; }) != n.end()) {
      throw UserError(
          "training.cuda_graph: on cannot capture the sweep's fp16, checkpointing or accumulation "
          "cells; set it to auto, which runs those cells eager and captures the others");
    }
  }
  const auto& modes = config.sweep.checkpointing;
  if (std::find(modes.begin(), modes.end(), CheckpointMode::Auto) != modes.end()) {
    if (config.sweep.data_parallel) {
      throw KeyError("sweep.checkpointing",
                     "auto is not combined with sweep.data_parallel: true (the choice is measured "
                     "without the reducer's buckets); drop one of them");
    }
    // A CPU without memory.limit or a budget (CUDA: each trial takes its card's).
    missing_budget(config, device, "sweep.checkpointing");
    // An auto cell's budget below what every batch holds: exit 3 first.
    refuse_what_no_trial_fits(config, device, CheckpointMode::Auto);
  }
  if (!config.sweep.devices.empty()) check_sweep_devices(config.sweep.devices, device);
  resident_splits(config, device);  // counted: data.device_resident's data missing is refused
  if (config.sweep.find_max && device.is_cpu() && config.memory.limit == 0) {
    throw UserError(
        "sweep.find_max: on the CPU there is no device memory to fill; set "
        "memory.limit (or --memory-limit) to the card size to emulate");
  }
}

}  // namespace training
