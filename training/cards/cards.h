// The cards a memory prediction can be for (`--card`): common training cards by name, or any card
// by its memory ("24GiB"). For each: the memory the driver reports (what nvidia-smi shows as
// memory.total), the architecture, and what the card's process holds beside the tensors:
//   - cuBLAS workspaces, from the caching allocator: one per (handle, stream), and a training step
//     uses two handles (the forward's thread and autograd's backward thread). Their size is
//     LibTorch 2.11's default (CUDABlasHandlePool.cpp, parseChosenWorkspaceSize): 32 MiB on compute
//     capability 9.x, 10.x and 12.x, else 4096 KiB x 2 + 16 KiB x 8; cuBLASLt shares it (unified
//     by default). CUBLAS_WORKSPACE_CONFIG changes it on the card and is not read here.
//   - outside the allocator: the CUDA context, the kernels loaded and the libraries' handles. Only
//     the H200 has been measured (docs/gpu.md: 771 MiB with torch 2.11.0+cu130); that figure is
//     used for every card and said as such.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "training/platform/memory.h"
#include "training/step/amp.h"

namespace training {

// What the vendor publishes for a card (0 = not known): dense peaks (a sheet's "with sparsity"
// figures halved), with their source. speed_model.h estimates a step's time from them.
struct DataSheet {
  double bandwidth_gbps = 0;  // memory bandwidth, GB/s
  int sms = 0;                // streaming multiprocessors
  int boost_mhz = 0;
  double fp32_tflops = 0;  // without tensor cores
  double tf32_tflops = 0;  // tensor cores, from sm_80 (GeForce: half rate with FP32 accumulate)
  double half_tflops = 0;  // fp16 tensor cores with FP32 accumulate, bf16 too from sm_80
  std::string source;
  bool known() const { return half_tflops > 0; }
};

struct Card {
  std::string name;           // "H100-80GB", or the size as given ("24GiB")
  int64_t memory_bytes = 0;   // the card's memory as the driver reports it
  std::string memory_source;  // where that figure comes from
  int compute_major = 0;      // compute capability's major version; 0 = not known
  std::string architecture;   // "sm_90"; "" = not known
  DataSheet sheet;            // none for a card given by its size

  // Why the card cannot run `precision` ("" where it can): bf16 before compute capability 8.0.
  std::string unsupported(Precision precision) const;
  // Why it can run none of `precisions` (a sweep's grid): "" where it runs one, or none is given.
  std::string unsupported(const std::vector<Precision>& precisions) const;
};

// What a CUDA process holds outside the caching allocator (the context, the kernels loaded, the
// libraries' handles): measured once, and assumed for every card and for a plan from a CPU sweep.
inline constexpr int64_t kOutsideAllocatorBytes = int64_t{771} << 20;
inline constexpr const char* kOutsideAllocatorSource =
    "measured on an H200 with torch 2.11.0+cu130 (docs/gpu.md)";

struct BesideTensors {
  int64_t cublas_workspace = 0;  // bytes of one workspace
  int64_t workspaces = 2;        // how many a training step creates
  int64_t outside_allocator = 0;
  std::string outside_source;
};

// The table of known cards, in the order docs/memory-studies.md lists them.
const std::vector<Card>& known_cards();

// A card by name (case and '-'/'_'/' ' ignored) or by size ("24GiB", parse_byte_size's forms).
// Throws UserError "--card: unknown card 'X' (did you mean 'Y'?)" naming the known ones otherwise.
// A card by size must be larger than what lies outside its allocator: `outside_allocator` where
// given (train plan's --overhead), else beside_tensors' figure. A bare number is refused, offered
// the sizes with a unit that leave room beside that once `headroom` (a plan's share kept free) is
// taken, and the cards whose names hold it.
Card find_card(const std::string& text, std::optional<int64_t> outside_allocator = std::nullopt,
               double headroom = 0);

BesideTensors beside_tensors(const Card& card);

}  // namespace training
