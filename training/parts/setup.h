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

// training.device as this machine can run it: "auto" resolved, a bad or missing device refused
// as a KeyError naming training.device. No set-up: a parent process (a sweep's, a plan's) that
// only needs to know the device calls this.
torch::Device training_device(const Config& config);

// What a command does on the device, which decides what of the set-up applies to it:
//   Step    a training step (train, sweep trials, one setting of train memory): everything below;
//   Study   train memory around its settings: all but the bf16 check, which each setting's own
//           precision gets (its Step set-up), not training.precision;
//   Loader  the loader bench, which moves batches and runs no step: threads, the device, current.
enum class DeviceUse { Step, Study, Loader };

// The device a process works on, set up, in this order: CPU threads (training.threads), the
// device (training_device; a data-parallel rank's own GPU under `launch`), made current, the
// checks that can refuse it (training.precision bf16 on this device; memory.snapshot's allocator
// history), memory.limit, the CUDA math switches (training.cudnn_benchmark, training.allow_tf32).
// Everything is refused before the caller writes anything.
torch::Device set_up_device(const Config& config, DeviceUse use = DeviceUse::Step,
                            const std::optional<LaunchEnv>& launch = std::nullopt);

// bf16 on a CPU without native bf16 is emulated, hundreds of times slower than fp32: said once,
// in the run's start-up summary.
void warn_if_bf16_is_emulated(const torch::Device& device, Precision precision);

// Joins the data-parallel group of `launch` with `options` (config.distributed, or a copy a sweep
// trial changes for its group of one). What the group refuses before waiting for anyone is said
// with its key: distributed.backend (with the remedy, gloo) and distributed.interface.
std::unique_ptr<ProcessGroup> join_group(const LaunchEnv& launch, const DistributedOptions& options,
                                         const torch::Device& device);
// What join_group would refuse of the backend, without joining: a sweep's trials each join a group
// of one, so `train sweep` refuses a backend they cannot use before its first trial.
void check_group_backend(const DistributedOptions& options, const torch::Device& device);

// The warm-up rule, the one place it is written: whole optimizer steps (options.accumulate_steps
// micro-batches each) on one batch, until one has been taken -- the first creates the optimizer's
// momentum and runs cuDNN's autotuning; with fp16 the GradScaler skips steps until its scale fits
// -- and at most kMostWarmupSteps. Returns the steps run. (A sweep trial warms up instead on its
// loader's batches for sweep.warmup_steps, which its peak counts: trial.cpp.)
inline constexpr int64_t kMostWarmupSteps = 20;
int64_t warm_up(StepParts& parts, const StepOptions& options, const torch::Tensor& images,
                const torch::Tensor& labels, const torch::Device& device);

}  // namespace training
