// The device seam: everything that needs CUDA lives behind these functions, in device_cuda.cpp
// (compiled only against a CUDA LibTorch); nothing else includes c10/cuda or ATen/cuda.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/types.h>

#include <functional>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "training/platform/memory.h"
#include "training/platform/memory_timeline.h"

namespace training {

// Why CUDA device `index` cannot be used by this binary on this machine; empty when it can.
std::string cuda_unavailable_reason(int64_t index);

// The device grammar, the one place it is written: "auto", "cpu", "cuda" or "cuda:<index>".
struct DeviceSpec {
  enum class Kind { Auto, Cpu, Cuda } kind = Kind::Auto;
  int64_t index = 0;  // for Cuda
};
// nullopt when `text` is not in the grammar. An index may be written with leading zeros, as a
// number may ("cuda:01" is cuda:1).
std::optional<DeviceSpec> parse_device_spec(const std::string& text);
// `text` as it is written back: its index without leading zeros ("cuda:01" -> "cuda:1"), as
// PyTorch writes a device; text outside the grammar unchanged (validate refuses it).
std::string device_spec_text(const std::string& text);

// "auto" (cuda:0 when a CUDA device is usable, else cpu), "cpu", "cuda" or "cuda:N".
// Throws UserError (the fact, no key: the caller names what set `spec`) when `spec` is not in the
// grammar or CUDA is asked for but cannot be used.
torch::Device resolve_device(const std::string& spec);

// The device a data-parallel rank trains on: cuda:<local_rank> when training on CUDA (one GPU per
// local rank, as torchrun arranges it), the CPU otherwise.
torch::Device rank_device(const torch::Device& configured, int64_t local_rank);

// Makes `device` the calling thread's current CUDA device (no-op on the CPU), so that everything
// that uses the current device (cuBLAS and cuDNN handles, NCCL, new streams) uses this one.
void make_current(const torch::Device& device);

// The PCI bus id of a CUDA device ("0000:3B:00.0"): the name NVML knows the same GPU by, whatever
// CUDA_VISIBLE_DEVICES renumbered. Empty on the CPU.
std::string pci_bus_id(const torch::Device& device);

// Waits for all queued work on `device` (no-op on the CPU), so wall-clock timings are honest.
void synchronize(const torch::Device& device);

// One line for the log: "cpu (2 threads)" or "cuda:0 (NVIDIA H200, 139.8 GiB, sm_90)".
std::string describe_device(const torch::Device& device);

// What of `device` sets a training step's memory and speed, for the decisions a run records (their
// chosen_for; another device decides again): the card ("cuda (NVIDIA H200, 139.8 GiB, sm_90)", with
// CUBLAS_WORKSPACE_CONFIG where set), or the CPU's model and kernels ("cpu (Intel(R) Xeon(R) ...,
// AVX512, bf16 native)", with ONEDNN_MAX_CPU_ISA where set). Not the threads (the layout's names
// them).
std::string device_identity(const torch::Device& device);

// The CPU's model as /proc/cpuinfo (`cpuinfo`) names it: the first "model name" (x86), else the
// first processor's "CPU implementer", "CPU part", "CPU variant" and "CPU revision" (Arm, which has
// no model name); "model unknown" where it has neither.
std::string cpu_model(std::istream& cpuinfo);

// CPU intra-op threads for this process; 0 keeps LibTorch's default (one per core).
void set_cpu_threads(int64_t threads);

// CUDA backend switches (process-wide; no effect on the CPU): cuDNN autotuning per input shape,
// and TF32 for fp32 matmuls and convolutions on GPUs that have it.
void set_cuda_math(bool cudnn_benchmark, bool allow_tf32);

// Device work recorded once and replayed (training/step/graphed_step.h): warm_up runs it eagerly,
// capture records it without running it, replay runs its device operations (not its host logic).
class Graph {
 public:
  virtual ~Graph() = default;
  virtual void warm_up(const std::function<void()>& work) = 0;
  virtual void capture(const std::function<void()>& work) = 0;
  virtual void replay() = 0;
  virtual bool captured() const = 0;
  virtual int64_t pool_bytes() const = 0;  // device memory the recorded work holds
};

// A CUDA graph (ATen's CUDAGraph) on its own side stream from the high-priority pool, which
// nothing else takes from. warm_up runs the work there (cuDNN's algorithm search, cuBLAS's
// workspaces and first allocations happen outside the capture); capture empties the caching and
// pinned-host allocators' caches (as torch.cuda.graph does) and records the work, autocast's cast
// cache off, in the graph's private pool; replay runs it on the current stream. A failed capture
// is undone (capture ended, routing to the pool ended, pool released) before the error is
// rethrown, and the graph stays uncaptured. Inputs are copied into tensors allocated before the
// capture, outputs read after replay. Throws UserError on the CPU and in builds without CUDA.
class DeviceGraph final : public Graph {
 public:
  explicit DeviceGraph(const torch::Device& device);
  ~DeviceGraph() override;
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  void warm_up(const std::function<void()>& work) override;
  void capture(const std::function<void()>& work) override;
  void replay() override;
  bool captured() const override;
  // Bytes the caching allocator reserved during the capture: the graph's private pool.
  int64_t pool_bytes() const override;
  // The side stream's id (c10::Stream::id), for tests.
  int64_t stream_id() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Seeds every generator that can influence training on `device`.
void seed_everything(uint64_t seed);

// Memory held on `device`: the CUDA caching allocator's counters, or on the CPU the tracking
// allocator's (installed by the first call to any of these, if not before).
MemoryStats memory_stats(const torch::Device& device);
void reset_peak_memory(const torch::Device& device);

// Adds every allocation and free on `device` to `timeline` until called again (nullptr stops):
// the tracking allocator's on the CPU, the caching allocator's trace (allocations handed out and
// frees completed) on CUDA. Once it returns, the previous timeline is no longer touched.
void trace_allocations(const torch::Device& device, MemoryTimeline* timeline);

// The CUDA caching allocator's history (torch.cuda.memory._record_memory_history): start (at most
// `max_entries` events, with C++ stack traces), the pickle pytorch.org/memory_viz opens, stop.
// Each throws check_memory_history_supported's UserError on the CPU; call that first.
void check_memory_history_supported(const torch::Device& device);
void start_memory_history(const torch::Device& device, int64_t max_entries);
std::string memory_snapshot_pickle(const torch::Device& device);
void stop_memory_history(const torch::Device& device);

// Device memory outside the caching allocator (CUDA context, cuBLAS and cuDNN handles): the
// device's used memory (other processes' too) minus the allocator's reserved bytes; 0 on the CPU.
int64_t memory_outside_allocator(const torch::Device& device);

// Makes allocations beyond `bytes` on `device` fail with c10::OutOfMemoryError, as on a card
// with that much memory (CUDA: the caching allocator's per-process memory fraction; CPU: the
// tracking allocator). 0 removes the limit. Throws UserError (the fact, no key: the caller names
// what set `bytes`) when the limit exceeds the device's memory.
void set_memory_limit(const torch::Device& device, int64_t bytes);
// set_memory_limit's refusal alone, for a parent process that checks what its children will set.
void check_memory_limit(const torch::Device& device, int64_t bytes);

// The device's memory: the GPU's total, or the machine's physical memory.
int64_t total_memory(const torch::Device& device);

// The one test of "ran out of memory": c10::OutOfMemoryError (CUDA's caching or the CPU's tracking
// allocator), CUDA's, cuBLAS's or cuDNN's own allocation failures, and OutOfMemory (errors.h).
bool is_out_of_memory(const std::exception& error);
bool is_out_of_memory_message(const std::string& message);

// This CPU computes bf16 natively (AVX-512 BF16 or AMX-BF16) and oneDNN may use it
// (ONEDNN_MAX_CPU_ISA or DNNL_MAX_CPU_ISA unset or AVX512_CORE_BF16 and above); elsewhere bf16 is
// emulated, hundreds of times slower than fp32. has_native_bf16 reads a capability table like
// at::cpu::get_cpu_capabilities()'s, onednn_isa_has_bf16 the variable's value.
bool cpu_has_native_bf16();
bool has_native_bf16(const std::unordered_map<std::string, c10::IValue>& capabilities);
bool onednn_isa_has_bf16(const char* max_isa);

// True when `device` computes bf16 natively: a CPU with native bf16, a GPU of compute capability
// 8.0 or newer. The default study grids (`train memory`, `train plan`) include bf16 only then.
bool has_fast_bf16(const torch::Device& device);

// Throws UserError naming `key` when `device` cannot compute in bf16 (on CUDA it needs compute
// capability 8.0 or newer; every CPU can, natively or emulated).
void check_bf16_supported(const torch::Device& device, const std::string& key);

}  // namespace training
