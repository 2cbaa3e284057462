#include "training/device_cuda.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "build_config.h"

#ifdef TRAIN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdio>
#include <string>

namespace training::cuda {

std::string describe(int index) {
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(index);
  char memory[64];
  std::snprintf(memory, sizeof memory, "%.1f GiB, sm_%d%d",
                static_cast<double>(props->totalGlobalMem) / (1 << 30), props->major, props->minor);
  return std::string(props->name) + ", " + memory;
}

MemoryStats memory_stats(int index) {
  using c10::CachingDeviceAllocator::StatType;
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  return {stats.allocated_bytes[aggregate].current, stats.allocated_bytes[aggregate].peak,
          stats.reserved_bytes[aggregate].current, stats.reserved_bytes[aggregate].peak};
}

void reset_peak_memory(int index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

void set_memory_fraction(int index, double fraction) {
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction,
                                                     static_cast<c10::DeviceIndex>(index));
}

int64_t total_memory(int index) {
  return static_cast<int64_t>(at::cuda::getDeviceProperties(index)->totalGlobalMem);
}

int compute_capability_major(int index) {
  return at::cuda::getDeviceProperties(index)->major;
}

#ifdef TRAIN_WITH_NCCL
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int64_t rank, int64_t world_size,
                                                    std::chrono::seconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank),
                                                     static_cast<int>(world_size), options);
}
#endif

}  // namespace training::cuda
