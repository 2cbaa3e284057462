// Shared helpers for the test executables: temporary folders and the real-data switch.
#pragma once

#include <ftw.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>

#include "training/platform/device.h"

namespace test_support {

// A fresh folder under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device random;
    path_ = std::filesystem::temp_directory_path() /
            ("train-test-" + std::to_string(random()) + std::to_string(random()));
    std::filesystem::create_directories(path_);
  }
  // Removed with nftw, not std::filesystem::remove_all: the pip LibTorch exports a private copy
  // of remove_all that jumps to address 0, and which copy a binary binds to depends on its link
  // (CMakeLists.txt names libstdc++ first for that). Built on the H200 machine, the 11 CUDA tests
  // that use a TempDir -- and none of the 5 that do not -- crashed after their last assertion;
  // built here they did not. That this call was the crash is likely, not confirmed there.
  ~TempDir() {
    ::nftw(
        path_.c_str(),
        [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The whole content of a text file ("" when it cannot be opened: the caller's assertions say so).
inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// In CI (CI=true or REQUIRE_REAL_DATA=1) a missing real data set is a failure, elsewhere a skip.
inline bool real_data_required() {
  const char* ci = std::getenv("CI");
  const char* required = std::getenv("REQUIRE_REAL_DATA");
  return (ci && std::string(ci) == "true") || (required && std::string(required) == "1");
}

// The real CIFAR-10 JPEG folders prepared by the ctest fixture (CIFAR10_TEST_ROOT overrides the
// build's location), if any.
inline std::optional<std::filesystem::path> real_data_root() {
  const char* env = std::getenv("CIFAR10_TEST_ROOT");
  const std::filesystem::path root = env ? env : CIFAR10_TEST_ROOT_DEFAULT;
  if (!std::filesystem::is_directory(root / "train")) return std::nullopt;
  return root;
}

}  // namespace test_support

// bf16 tests need a CPU that computes bf16 natively: elsewhere (AVX2-only CPUs) bf16 is emulated
// about 300 times slower than fp32 and the test says why it skipped.
#define NATIVE_BF16_OR_SKIP()                                                                 \
  if (!training::cpu_has_native_bf16())                                                       \
  GTEST_SKIP() << "this CPU has no native bf16 (no AVX-512 BF16 or AMX-BF16): bf16 would be " \
                  "emulated, hundreds of times slower than fp32"

// Binds `root` to the real-data folder, or skips (fails in CI) with a clear message.
#define REAL_DATA_ROOT_OR_SKIP(root)                                                     \
  const auto root##_found = test_support::real_data_root();                              \
  if (!root##_found) {                                                                   \
    const char* why =                                                                    \
        "real CIFAR-10 not prepared: ../shared/data/cifar10-jpeg.tar.gz is absent (the " \
        "ctest fixture unpacks it into " CIFAR10_TEST_ROOT_DEFAULT ")";                  \
    if (test_support::real_data_required()) FAIL() << why;                               \
    GTEST_SKIP() << why;                                                                 \
  }                                                                                      \
  const std::filesystem::path root = *root##_found
