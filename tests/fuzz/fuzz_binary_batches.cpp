// Fuzz target: the CIFAR-10 binary batch reader on an arbitrary file. Every input must be read or
// refused with DataError (naming the file and record); anything else is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/cifar10_binary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                            ("fuzz-batch-" + std::to_string(::getpid()) + ".bin");
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    const auto split = data::read_binary_batches({file}, 4);
    (void)split;
  } catch (const data::DataError&) {
  }
  return 0;
}
