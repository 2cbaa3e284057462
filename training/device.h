// The device seam. Everything that needs CUDA headers or libraries lives behind these
// functions, in device_cuda.cpp, which is compiled only when the LibTorch found is a CUDA build;
// nothing else in the project includes c10/cuda or ATen/cuda.
#pragma once

#include <torch/types.h>

#include <string>

namespace training {

// True when this binary was built against a CUDA LibTorch.
bool built_with_cuda();

// "auto" (cuda:0 when a CUDA device is usable, else cpu), "cpu", "cuda" or "cuda:N".
// Throws UserError naming training.device when CUDA is asked for but cannot be used.
torch::Device resolve_device(const std::string& spec);

// Waits for all queued work on `device` (no-op on the CPU), so wall-clock timings are honest.
void synchronize(const torch::Device& device);

// One line for the log: "cpu (2 threads)" or "cuda:0 (NVIDIA H200, 139.8 GiB, sm_90)".
std::string describe_device(const torch::Device& device);

// Seeds every generator that can influence training on `device`.
void seed_everything(uint64_t seed);

}  // namespace training
