#include "training/device.h"

#include "build_config.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <regex>

#include "training/errors.h"

#ifdef TRAIN_WITH_CUDA
#include "training/device_cuda.h"
#endif

namespace training {

bool built_with_cuda() {
#ifdef TRAIN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

torch::Device resolve_device(const std::string& spec) {
  if (spec == "cpu") return torch::kCPU;
  const bool usable = built_with_cuda() && torch::cuda::is_available();
  if (spec == "auto") return usable ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);

  static const std::regex kCuda("cuda(:([0-9]+))?");
  std::smatch match;
  if (!std::regex_match(spec, match, kCuda)) {
    throw UserError("training.device: expected auto, cpu, cuda or cuda:<index>, got '" + spec +
                    "'");
  }
  if (!built_with_cuda()) {
    throw UserError("training.device: '" + spec +
                    "' requested, but this build uses a CPU-only LibTorch; use device: cpu");
  }
  if (!usable) {
    throw UserError("training.device: '" + spec +
                    "' requested, but no CUDA device is available on this machine (no GPU or no "
                    "driver); use device: cpu or auto");
  }
  const int index = match[2].matched ? std::stoi(match[2].str()) : 0;
  const int count = static_cast<int>(torch::cuda::device_count());
  if (index >= count) {
    throw UserError("training.device: '" + spec + "' requested, but this machine has " +
                    std::to_string(count) + " CUDA device(s)");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

std::string describe_device(const torch::Device& device) {
#ifdef TRAIN_WITH_CUDA
  if (device.is_cuda()) return device.str() + " (" + cuda::describe(device.index()) + ")";
#endif
  return device.str() + " (" + std::to_string(torch::get_num_threads()) + " threads)";
}

void seed_everything(uint64_t seed) {
  torch::manual_seed(seed);  // also seeds every CUDA generator when CUDA is present
}

}  // namespace training
