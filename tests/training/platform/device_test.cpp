// The device seam on the CPU: what it can answer without a GPU (the CUDA half is in tests/cuda).
#include "training/platform/device.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

#include "training/platform/errors.h"

namespace {

TEST(Device, OutOfMemoryIsRecognisedInEveryFormTheLibrariesRaise) {
  using training::is_out_of_memory_message;
  // The caching allocator raises c10::OutOfMemoryError; CUDA, cuBLAS and cuDNN allocating for
  // themselves raise plain errors that must count as out of memory too.
  EXPECT_TRUE(is_out_of_memory_message("CUDA error: out of memory"));
  EXPECT_TRUE(is_out_of_memory_message(
      "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"));
  EXPECT_TRUE(is_out_of_memory_message("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"));
  // memory.limit's refusal on the CPU, as a torch::data worker's error carries it (round 5: exit
  // 1).
  EXPECT_TRUE(is_out_of_memory_message(
      "Caught exception in DataLoader worker thread. Original message: CPU out of memory "
      "(tracked): tried to allocate 12.00 KiB with 1.00 KiB already held; limit 1.00 KiB"));
  EXPECT_FALSE(is_out_of_memory_message("CUDA error: an illegal memory access was encountered"));
  EXPECT_FALSE(is_out_of_memory_message("CUBLAS_STATUS_EXECUTION_FAILED"));
  EXPECT_FALSE(is_out_of_memory_message("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"));

  const c10::OutOfMemoryError allocator({"f", "file", 1},
                                        "CUDA out of memory. Tried to allocate 2 GiB");
  EXPECT_TRUE(training::is_out_of_memory(allocator));
  const c10::Error cublas({"f", "file", 1},
                          "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling x");
  EXPECT_TRUE(training::is_out_of_memory(cublas));
  const c10::Error other({"f", "file", 1}, "Expected all tensors to be on the same device");
  EXPECT_FALSE(training::is_out_of_memory(other));
  EXPECT_FALSE(training::is_out_of_memory(std::runtime_error("CUDA error: invalid argument")));
}

TEST(Device, TheCpuNeedsNoBindingAndHasNoBusId) {
  EXPECT_EQ(training::rank_device(torch::kCPU, 1), torch::Device(torch::kCPU));
  EXPECT_NO_THROW(training::make_current(torch::kCPU));
  EXPECT_EQ(training::pci_bus_id(torch::kCPU), "");
}

TEST(Device, NativeBf16IsReadFromTheCpuCapabilities) {
  std::unordered_map<std::string, c10::IValue> avx2_only = {
      {"avx2", true}, {"avx512_bf16", false}, {"amx_bf16", false}};
  EXPECT_FALSE(training::has_native_bf16(avx2_only));
  EXPECT_FALSE(training::has_native_bf16({}));
  auto sapphire_rapids = avx2_only;
  sapphire_rapids["amx_bf16"] = true;
  EXPECT_TRUE(training::has_native_bf16(sapphire_rapids));
  auto cooper_lake = avx2_only;
  cooper_lake["avx512_bf16"] = true;
  EXPECT_TRUE(training::has_native_bf16(cooper_lake));
}

// ONEDNN_MAX_CPU_ISA caps the instructions oneDNN uses: below AVX512_CORE_BF16, bf16 is emulated
// on any CPU (the AVX2 kernels the suite's second pass runs under).
TEST(Device, OneDnnCappedBelowBf16InstructionsHasNoNativeBf16) {
  EXPECT_TRUE(training::onednn_isa_has_bf16(nullptr));
  EXPECT_TRUE(training::onednn_isa_has_bf16(""));
  for (const char* isa : {"AVX2", "avx2", "AVX512_CORE", "AVX512_CORE_VNNI", "SSE41"}) {
    EXPECT_FALSE(training::onednn_isa_has_bf16(isa)) << isa;
  }
  for (const char* isa : {"AVX512_CORE_BF16", "AVX512_CORE_AMX", "ALL", "DEFAULT"}) {
    EXPECT_TRUE(training::onednn_isa_has_bf16(isa)) << isa;
  }
}

}  // namespace

// Thirteenth pass: an Arm CPU's /proc/cpuinfo has no "model name": every such CPU was "model
// unknown", one device to the decisions a run records. Its implementer and part name it.
TEST(Device, TheCpuModelIsReadOnX86AndArm) {
  std::istringstream x86(
      "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C "
      "CPU @ 2.70GHz\nflags\t\t: fpu avx512f\n\nprocessor\t: 1\nmodel name\t: other\n");
  EXPECT_EQ(training::cpu_model(x86), "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz");
  const std::string arm_head = "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd\n";
  std::istringstream neoverse(arm_head +
                              "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: "
                              "0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n\nprocessor\t: 1\nCPU "
                              "implementer\t: 0x41\nCPU part\t: 0xd0c\n");
  EXPECT_EQ(training::cpu_model(neoverse),
            "CPU implementer 0x41, CPU variant 0x1, CPU part 0xd40, CPU revision 1");
  std::istringstream other_part(arm_head + "CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n");
  EXPECT_EQ(training::cpu_model(other_part), "CPU implementer 0x41, CPU part 0xd0c");
  std::istringstream nothing("processor\t: 0\nflags\t: fpu\n");
  EXPECT_EQ(training::cpu_model(nothing), "model unknown");
}
