// Internal to the device seam: implemented in device_cuda.cpp (CUDA builds only) and called
// only from device.cpp.
#pragma once

#include <string>

#include "training/memory.h"

namespace training::cuda {

std::string describe(int index);
MemoryStats memory_stats(int index);
void reset_peak_memory(int index);
void set_memory_fraction(int index, double fraction);
int64_t total_memory(int index);
int compute_capability_major(int index);

}  // namespace training::cuda
