// The one set-up before a step, for every command that steps (train, sweep trials, train memory,
// the loader bench) and for the checkpointing choice's measurement: the device, then the step's
// warm-up. A new set-up rule (an allocator option, a seed rule) goes here, once.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "training/config/config.h"
#include "training/platform/distributed.h"
#include "training/platform/errors.h"
#include "training/step/step.h"

namespace training {

// Runs `check` and returns what it returns; a fact the platform refuses with (a UserError without
// a key) is said as `key`'s: a KeyError, which the command leads with where the key was set.
template <class Check>
auto as_key(const char* key, Check&& check) -> decltype(check()) {
  try {
    return check();
  } catch (const KeyError&) {
    throw;
  } catch (const UserError& e) {
    throw KeyError(key, e.what());
  }
}

// training.device as this machine can run it ("auto" resolved; KeyError for a bad or missing one),
// without setting anything up: for a parent process that only needs to know it.
torch::Device training_device(const Config& config);

// What a command does on the device, which decides what of the set-up applies to it:
//   Step    a training step (train, sweep trials, one setting of train memory): everything below;
//   Study   train memory around its settings: all but the bf16 check, which each setting's own
//           precision gets (its Step set-up), not training.precision;
//   Loader  the loader bench, which moves batches and runs no step: threads, the device, current.
enum class DeviceUse { Step, Study, Loader };

// The device a process works on, set up in this order, every refusal before the caller writes
// anything: CPU threads, the device (a data-parallel rank's own GPU under `launch`) made current,
// the checks that can refuse it (bf16, memory.snapshot), memory.limit, the CUDA math switches.
torch::Device set_up_device(const Config& config, DeviceUse use = DeviceUse::Step,
                            const std::optional<LaunchEnv>& launch = std::nullopt);

// bf16 on a CPU without native bf16 is emulated, hundreds of times slower than fp32: said once,
// in the run's start-up summary.
void warn_if_bf16_is_emulated(const torch::Device& device, Precision precision);

// Joins the data-parallel group of `launch` with `options`; what the group refuses before waiting
// for anyone is said with its key (distributed.backend, distributed.interface).
std::unique_ptr<ProcessGroup> join_group(const LaunchEnv& launch, const DistributedOptions& options,
                                         const torch::Device& device);
// What join_group would refuse of the backend, without joining (train sweep, before its trials).
void check_group_backend(const DistributedOptions& options, const torch::Device& device);

// The warm-up rule: whole optimizer steps on one batch until one has been taken (the first makes
// the momentum and runs cuDNN's autotuning; fp16's GradScaler skips steps until its scale fits),
// at most kMostWarmupSteps; returns the steps run. (A sweep trial warms up on its loader instead.)
inline constexpr int64_t kMostWarmupSteps = 20;
int64_t warm_up(StepParts& parts, const StepOptions& options, const torch::Tensor& images,
                const torch::Tensor& labels, const torch::Device& device);

}  // namespace training
