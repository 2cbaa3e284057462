#include "training/device_cuda.h"

#include <ATen/cuda/CUDAContext.h>

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

}  // namespace training::cuda
