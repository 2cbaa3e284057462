// Internal to the device seam: implemented in device_cuda.cpp (CUDA builds only) and called
// only from device.cpp.
#pragma once

#include <string>

namespace training::cuda {

std::string describe(int index);

}  // namespace training::cuda
