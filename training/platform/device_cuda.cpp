#include "training/platform/device_cuda.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/memory_snapshot.h>

#include "build_config.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"

#ifdef TRAIN_WITH_NCCL
#include <dlfcn.h>
#include <nccl.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace training::cuda {

namespace {

// CUDA starts lazily (torch.cuda._lazy_init): before the first CUDA tensor the caching allocator
// fails its "Allocator not initialized for device" assertion, and these calls may come first.
void initialize() {
  at::globalContext().lazyInitDevice(c10::kCUDA);
}

c10::DeviceIndex device_index(int index) {
  return static_cast<c10::DeviceIndex>(index);
}

// The timeline the caching allocator's trace feeds, and the device it is for. The allocator calls
// the tracker with its own lock held, so the tracker only adds a number under this mutex.
std::mutex traced_mutex;
MemoryTimeline* traced_timeline = nullptr;
c10::DeviceIndex traced_device = 0;

}  // namespace

std::string describe(int index) {
  initialize();
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(device_index(index));
  char memory[64];
  std::snprintf(memory, sizeof memory, "%.1f GiB, sm_%d%d",
                static_cast<double>(props->totalGlobalMem) / (1 << 30), props->major, props->minor);
  return std::string(props->name) + ", " + memory;
}

MemoryStats memory_stats(int index) {
  initialize();
  using c10::CachingDeviceAllocator::StatType;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index(index));
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  return {stats.allocated_bytes[aggregate].current, stats.allocated_bytes[aggregate].peak,
          stats.reserved_bytes[aggregate].current, stats.reserved_bytes[aggregate].peak};
}

void reset_peak_memory(int index) {
  initialize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(device_index(index));
}

void set_memory_fraction(int index, double fraction) {
  initialize();
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device_index(index));
}

int64_t total_memory(int index) {
  initialize();
  return static_cast<int64_t>(at::cuda::getDeviceProperties(device_index(index))->totalGlobalMem);
}

int compute_capability_major(int index) {
  initialize();
  return at::cuda::getDeviceProperties(device_index(index))->major;
}

void make_current(int index) {
  initialize();
  c10::cuda::set_device(device_index(index));
}

std::string pci_bus_id(int index) {
  char id[64] = {};
  C10_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, index));
  return id;
}

void trace_allocations(int index, MemoryTimeline* timeline) {
  initialize();
  // A tracker cannot be detached; it is attached once and does nothing while no timeline is set.
  static std::once_flag attached;
  std::call_once(attached, [] {
    using c10::cuda::CUDACachingAllocator::TraceEntry;
    c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker([](const TraceEntry& entry) {
      std::lock_guard<std::mutex> lock(traced_mutex);
      if (traced_timeline == nullptr || entry.device_ != traced_device) return;
      const auto size = static_cast<int64_t>(entry.size_);
      if (entry.action_ == TraceEntry::ALLOC) traced_timeline->add(size);
      if (entry.action_ == TraceEntry::FREE_COMPLETED) traced_timeline->add(-size);
    });
  });
  std::lock_guard<std::mutex> lock(traced_mutex);
  traced_timeline = timeline;
  traced_device = device_index(index);
}

void start_memory_history(int index, int64_t max_entries) {
  initialize();
  make_current(index);
  // As torch.cuda.memory._record_memory_history(max_entries=...), without C++ stacks (the overload
  // taking `stacks` knows only "python" or "all", which symbolises a stack per event).
  torch::cuda::_record_memory_history(/*enabled=*/true, /*record_context=*/true, max_entries,
                                      /*trace_alloc_record_context=*/true,
                                      /*record_cpp_context=*/false);
}

std::string memory_snapshot_pickle() {
  return torch::cuda::_memory_snapshot_pickled();
}

void stop_memory_history() {
  // As torch.cuda.memory._record_memory_history(enabled=None).
  torch::cuda::_record_memory_history(/*enabled=*/false);
}

int64_t memory_outside_allocator(int index) {
  make_current(index);
  size_t free = 0, total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const int64_t used = static_cast<int64_t>(total - free);
  return std::max<int64_t>(0, used - memory_stats(index).reserved);
}

#ifdef TRAIN_WITH_NCCL
namespace {

std::string nccl_version_text(int code) {
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

// The NCCL that libtorch_cuda loaded must be the one this build's nccl.h describes.
void check_nccl_version() {
  using GetVersion = int (*)(int*);
  auto get_version = reinterpret_cast<GetVersion>(::dlsym(RTLD_DEFAULT, "ncclGetVersion"));
  int loaded = 0;
  if (!get_version || get_version(&loaded) != 0) {
    spdlog::warn("NCCL: cannot ask the loaded library its version; built against NCCL {}",
                 nccl_version_text(NCCL_VERSION_CODE));
    return;
  }
  if (loaded / 100 != NCCL_VERSION_CODE / 100) {
    throw BackendRefused("nccl: this build was compiled against NCCL " +
                         nccl_version_text(NCCL_VERSION_CODE) +
                         " (nccl.h) but LibTorch loaded NCCL " + nccl_version_text(loaded) +
                         "; rebuild against the wheel's own headers (site-packages/nvidia/nccl)");
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int64_t rank, int64_t world_size,
                                                    std::chrono::seconds timeout) {
  check_nccl_version();
  // A failed or timed-out collective then throws from wait() (exit 4) instead of the watchdog
  // aborting the process; read from the environment only (no Options field), a user's value kept.
  ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank),
                                                     static_cast<int>(world_size), options);
}
#endif

}  // namespace training::cuda

namespace training {

struct DeviceGraph::State {
  State(c10::DeviceIndex device, c10::cuda::CUDAStream side_stream)
      : index(device), stream(side_stream) {}
  c10::DeviceIndex index;
  c10::cuda::CUDAStream stream;
  at::cuda::CUDAGraph graph;
  bool captured = false;
  int64_t pool_bytes = 0;
};

DeviceGraph::DeviceGraph(const torch::Device& device) {
  if (!device.is_cuda()) {
    throw UserError("CUDA graphs need a CUDA device; this run trains on " + device.str());
  }
  const auto index = static_cast<c10::DeviceIndex>(device.has_index() ? device.index() : 0);
  at::globalContext().lazyInitDevice(c10::kCUDA);
  c10::cuda::CUDAGuard on_device(index);
  // A stream of its own (no capture on the legacy default stream; the warm-up runs there so that
  // cuBLAS's workspaces exist beforehand), from the high-priority pool: every other stream here
  // comes from the low-priority one, so none is ever this one (pools hand out 32 round-robin).
  state_ =
      std::make_unique<State>(index, c10::cuda::getStreamFromPool(/*isHighPriority=*/true, index));
}

DeviceGraph::~DeviceGraph() = default;

namespace {

// `waiting` starts its next work after everything queued on `done` so far.
void wait_for(const c10::cuda::CUDAStream& waiting, const c10::cuda::CUDAStream& done) {
  c10::cuda::CUDAEvent event;
  event.record(done);
  event.block(waiting);
}

// Runs `undo`; false when it threw (used on a path that already has an error to report).
template <class Undo>
bool quietly(Undo&& undo) {
  try {
    undo();
    return true;
  } catch (...) {
    return false;
  }
}

// After a failed capture, leaves the stream, allocators and error state as before capture_begin:
// CUDAGraph::capture_end throws before it ends the allocators' routing to the pool, which would
// leave later allocations consulting a dead capture and the pool never reclaimed. A routing it did
// end is left alone with its pool: CUDAGraph's destructor releases it, and twice would abort.
void abandon_capture(c10::DeviceIndex device, const c10::cuda::CUDAStream& stream,
                     c10::MempoolId_t pool) {
  cudaGraph_t partial = nullptr;
  if (cudaStreamEndCapture(stream.stream(), &partial) == cudaSuccess && partial != nullptr) {
    cudaGraphDestroy(partial);
  }
  (void)cudaGetLastError();  // a capture's failure is not sticky; clear what it left
  if (quietly([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool); })) {
    quietly([&] { c10::cuda::CUDACachingAllocator::releasePool(device, pool); });
  }
  if (quietly([&] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool); })) {
    quietly([&] { at::getHostAllocator(at::kCUDA)->release_pool(pool); });
  }
  quietly([] { c10::cuda::CUDACachingAllocator::emptyCache(); });  // frees the released pool
}

}  // namespace

void DeviceGraph::warm_up(const std::function<void()>& work) {
  const auto current = c10::cuda::getCurrentCUDAStream(state_->index);
  wait_for(state_->stream, current);
  {
    c10::cuda::CUDAStreamGuard on_stream(state_->stream);
    work();
  }
  wait_for(current, state_->stream);
}

void DeviceGraph::capture(const std::function<void()>& work) {
  c10::cuda::CUDAGuard on_device(state_->index);
  // As torch.cuda.graph does: nothing in flight, the warm-up's cached blocks (which cannot serve
  // the graph's pool, so would hold the step's transients twice) and the pinned cache released.
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  at::getHostAllocator(at::kCUDA)->empty_cache();
  const int64_t reserved_before = cuda::memory_stats(state_->index).reserved;
  const bool cache_was_enabled = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);  // cached casts would outlive the capture
  // The pool's id is ours, so that a failed capture can release it (CUDAGraph keeps its own
  // private until capture_end succeeds).
  const auto pool = at::cuda::graph_pool_handle();
  {
    c10::cuda::CUDAStreamGuard on_stream(state_->stream);
    try {
      // Thread-local mode: the loader's prefetch thread keeps copying batches on its own stream
      // during the capture, which the default (global) mode would forbid it.
      state_->graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      work();
      state_->graph.capture_end();
    } catch (...) {
      at::autocast::set_autocast_cache_enabled(cache_was_enabled);
      abandon_capture(state_->index, state_->stream, pool);
      throw;
    }
  }
  at::autocast::set_autocast_cache_enabled(cache_was_enabled);
  state_->pool_bytes = cuda::memory_stats(state_->index).reserved - reserved_before;
  state_->captured = true;
}

void DeviceGraph::replay() {
  state_->graph.replay();
}

bool DeviceGraph::captured() const {
  return state_->captured;
}

int64_t DeviceGraph::pool_bytes() const {
  return state_->pool_bytes;
}

int64_t DeviceGraph::stream_id() const {
  return state_->stream.id();
}

}  // namespace training
