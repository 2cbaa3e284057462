#include "training/parts/setup.h"

#include <spdlog/spdlog.h>

#include "training/platform/device.h"
#include "training/platform/errors.h"

namespace training {

torch::Device training_device(const Config& config) {
  return as_key("training.device", [&] { return resolve_device(config.training.device); });
}

torch::Device set_up_device(const Config& config, DeviceUse use,
                            const std::optional<LaunchEnv>& launch) {
  set_cpu_threads(config.training.threads);
  torch::Device device = training_device(config);
  if (launch && launch->world_size > 1) device = rank_device(device, launch->local_rank);
  make_current(device);
  if (use == DeviceUse::Loader) return device;
  if (use == DeviceUse::Step && config.training.precision == Precision::BF16) {
    check_bf16_supported(device, "training.precision");
  }
  if (config.memory.snapshot) {
    as_key("memory.snapshot", [&] { check_memory_history_supported(device); });
  }
  as_key("memory.limit", [&] { set_memory_limit(device, config.memory.limit); });
  set_cuda_math(config.training.cudnn_benchmark, config.training.allow_tf32);
  return device;
}

void warn_if_bf16_is_emulated(const torch::Device& device, Precision precision) {
  if (device.is_cpu() && precision == Precision::BF16 && !cpu_has_native_bf16()) {
    spdlog::warn(
        "training.precision: bf16 on a CPU without native bf16 (no AVX-512 BF16 or AMX-BF16): "
        "it is emulated, and this run will be far slower than fp32 (a bf16 matmul here runs "
        "hundreds of times slower)");
  }
}

namespace {

// `body`, with the group's refusals said as the keys that set them.
template <class Body>
auto with_group_keys(Body&& body) {
  try {
    return body();
  } catch (const BackendRefused& e) {
    throw KeyError("distributed.backend", std::string(e.what()) + "; set it to gloo");
  } catch (const InterfaceRefused& e) {
    throw KeyError("distributed.interface", e.what());
  }
}

}  // namespace

std::unique_ptr<ProcessGroup> join_group(const LaunchEnv& launch, const DistributedOptions& options,
                                         const torch::Device& device) {
  return with_group_keys([&] {
    return std::make_unique<ProcessGroup>(launch, options, device, "distributed.interface");
  });
}

void check_group_backend(const DistributedOptions& options, const torch::Device& device) {
  with_group_keys([&] { return uses_nccl(options.backend, device); });
}

int64_t warm_up(StepParts& parts, const StepOptions& options, const torch::Tensor& images,
                const torch::Tensor& labels, const torch::Device& device) {
  int64_t steps = 0;
  bool taken = false;
  while (!taken && steps < kMostWarmupSteps) {
    for (int64_t micro = 0; micro < options.accumulate_steps(); ++micro) {
      taken = train_step(parts, images, labels, options, micro).stepped;
    }
    synchronize(device);
    ++steps;
  }
  return steps;
}

}  // namespace training
