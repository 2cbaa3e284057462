// The device seam. Everything that needs CUDA headers or libraries lives behind these
// functions, in device_cuda.cpp, which is compiled only when the LibTorch found is a CUDA build;
// nothing else in the project includes c10/cuda or ATen/cuda.
#pragma once

#include <torch/types.h>

#include <string>

#include "training/amp.h"
#include "training/memory.h"

namespace training {

// True when this binary was built against a CUDA LibTorch.
bool built_with_cuda();

// Why CUDA device `index` cannot be used by this binary on this machine; empty when it can.
std::string cuda_unavailable_reason(int64_t index);

// "auto" (cuda:0 when a CUDA device is usable, else cpu), "cpu", "cuda" or "cuda:N".
// Throws UserError naming training.device when CUDA is asked for but cannot be used.
torch::Device resolve_device(const std::string& spec);

// Waits for all queued work on `device` (no-op on the CPU), so wall-clock timings are honest.
void synchronize(const torch::Device& device);

// One line for the log: "cpu (2 threads)" or "cuda:0 (NVIDIA H200, 139.8 GiB, sm_90)".
std::string describe_device(const torch::Device& device);

// CPU intra-op threads for this process; 0 keeps LibTorch's default (one per core).
void set_cpu_threads(int64_t threads);

// CUDA backend switches (process-wide; no effect on the CPU): cuDNN autotuning per input shape,
// and TF32 for fp32 matmuls and convolutions on GPUs that have it.
void set_cuda_math(bool cudnn_benchmark, bool allow_tf32);

// Seeds every generator that can influence training on `device`.
void seed_everything(uint64_t seed);

// Memory held on `device`: the CUDA caching allocator's counters, or on the CPU the tracking
// allocator's (installed by the first call to any of these, if not before).
MemoryStats memory_stats(const torch::Device& device);
void reset_peak_memory(const torch::Device& device);

// Makes allocations beyond `bytes` on `device` fail with c10::OutOfMemoryError, as on a card
// with that much memory (CUDA: the caching allocator's per-process memory fraction; CPU: the
// tracking allocator). 0 removes the limit. Throws UserError naming memory.limit when the limit
// exceeds the device's memory.
void set_memory_limit(const torch::Device& device, int64_t bytes);

// The device's memory: the GPU's total, or the machine's physical memory.
int64_t total_memory(const torch::Device& device);

// Throws UserError naming `key` when `device` cannot compute in `precision` (bf16 needs a
// compute capability 8.0+ GPU).
void check_precision_supported(const torch::Device& device, Precision precision,
                               const std::string& key);

}  // namespace training
