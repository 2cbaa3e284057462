// Memory accounting that works without a GPU: a CPU allocator that counts the bytes held by CPU
// tensors (current and peak) and can refuse allocations beyond a limit exactly like a device
// out of memory, plus byte-size parsing and printing for configs and logs.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "training/platform/allocation_trace.h"
#include "training/platform/memory_timeline.h"

namespace training {

inline constexpr int64_t kMiB = int64_t{1} << 20;  // the one spelling of a MiB

struct MemoryStats {
  int64_t allocated = 0;       // bytes held by tensors now
  int64_t peak_allocated = 0;  // most bytes held since the last reset
  int64_t reserved = 0;  // bytes held by the allocator (CUDA caching allocator; CPU = allocated)
  int64_t peak_reserved = 0;
};

// Wraps LibTorch's default CPU allocator. Install it once at start-up, before tensors are
// made; tensors made earlier are not counted (and are freed correctly all the same).
// oneDNN's scratch comes through raw_allocate and is counted: it is this CPU's peak (other CPUs'
// kernels keep other scratch). A card's prediction leaves it out (allocation_trace.h).
class TrackingCpuAllocator final : public c10::Allocator {
 public:
  // The process-wide instance, installed as LibTorch's CPU allocator on first call.
  static TrackingCpuAllocator& instance();

  c10::DataPtr allocate(size_t bytes) override;
  // Simple data pointers (context == data), which raw_allocate() users such as oneDNN need.
  c10::DeleterFnPtr raw_deleter() const override { return &TrackingCpuAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  MemoryStats stats() const;
  void reset_peak();
  // Allocations that would take the held bytes above `bytes` throw c10::OutOfMemoryError
  // (0 = no limit).
  void set_limit(int64_t bytes) { limit_.store(bytes); }
  int64_t limit() const { return limit_.load(); }
  // Every counted allocation and free is added to `timeline` until this is called again (nullptr
  // stops). Once it returns, the previous timeline is no longer touched.
  void set_timeline(MemoryTimeline* timeline);
  // Every counted allocation and free is recorded in `trace` until this is called again (nullptr
  // stops); the allocations held when it starts are recorded first, in the order they were made.
  void set_trace(AllocationTrace* trace);

  // CPU tensors allocated on this thread while a HostData object lives are host-side data (the
  // decoded dataset): neither counted nor limited, because on a GPU they would not be in device
  // memory either. That keeps memory.limit's meaning the same on the CPU as on CUDA, and a
  // sweep's largest batch (whose trials hold no dataset) true for `train`.
  class HostData {
   public:
    HostData();
    ~HostData();
    HostData(const HostData&) = delete;
    HostData& operator=(const HostData&) = delete;

   private:
    bool previous_;
  };

 private:
  explicit TrackingCpuAllocator(c10::Allocator* base)
      : base_(base), base_deleter_(base->raw_deleter()) {}
  static void release(void* data);

  c10::Allocator* base_;
  c10::DeleterFnPtr base_deleter_;  // frees what base_ allocated
  std::mutex sizes_mutex_;
  struct Held {
    int64_t size = 0;
    int64_t order = 0;  // the allocation's number since the allocator was installed
  };
  std::unordered_map<void*, Held> sizes_;  // live allocations
  int64_t made_ = 0;                       // allocations made, guarded by sizes_mutex_
  MemoryTimeline* timeline_ = nullptr;     // guarded by sizes_mutex_
  AllocationTrace* trace_ = nullptr;       // guarded by sizes_mutex_
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> limit_{0};
};

// "12GiB", "512MiB", "1.5GB", "64KiB", "1000" (bytes). Binary (KiB, MiB, GiB, TiB) and decimal
// (KB, MB, GB, TB) units, case-insensitive. Throws std::invalid_argument naming what it expected
// (a whole number of bytes among the forms only where `bare_bytes` takes one).
int64_t parse_byte_size(const std::string& text, bool bare_bytes = true);
// A size a flag gives (`flag`: "--memory"), above 0: UserError naming the flag otherwise. The one
// reading of a size flag: app/flag_values.cpp's and a card's size (cards.h) use it, with
// `bare_bytes` false (their sizes take a unit: the message offers none without).
int64_t size_flag(const std::string& flag, const std::string& text, bool bare_bytes = true);

// A byte size as the config writes it: "12GiB", "512MiB", or plain bytes (exact, re-readable).
std::string byte_size_text(int64_t bytes);

// A size to advise ("a card of at least 1137MiB"): `bytes` rounded up to a whole MiB, written as
// byte_size_text writes it, so that what is typed back is accepted and never below `bytes`.
std::string size_at_least_text(int64_t bytes);

// "1.50 GiB", "512.0 MiB", "12 B": the largest binary unit that keeps the number >= 1.
std::string format_bytes(int64_t bytes);
// The two sides of a comparison as format_bytes writes them, or where that writes two different
// sizes alike, in one unit with the decimals that tell them apart ("139.964 MiB" against
// "139.961 MiB"; to the byte where six do not).
std::pair<std::string, std::string> format_bytes_apart(int64_t a, int64_t b);

inline double to_mib(int64_t bytes) {
  return static_cast<double>(bytes) / kMiB;
}
// "12.3": MiB with one decimal, for tables whose header says the unit.
std::string mib_text(int64_t bytes);

}  // namespace training
