// Memory accounting without a GPU: a CPU allocator that counts bytes held (current, peak) and
// refuses allocations beyond a limit as a device would; byte sizes read and printed.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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

// Wraps LibTorch's default CPU allocator, installed before tensors are made (earlier ones are not
// counted). oneDNN's scratch (raw_allocate) is counted: it is this CPU's peak, which a card's
// prediction leaves out (allocation_trace.h).
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
  // Allocations above `bytes` held throw c10::OutOfMemoryError (0 = no limit).
  void set_limit(int64_t bytes) { limit_.store(bytes); }
  int64_t limit() const { return limit_.load(); }
  // Every counted allocation and free goes to `timeline` or `trace` until called again (nullptr
  // stops); a trace starts with the allocations held, in the order they were made.
  void set_timeline(MemoryTimeline* timeline);
  void set_trace(AllocationTrace* trace);

  // CPU tensors allocated on this thread while one lives are host data (the decoded dataset), not
  // counted or limited as on a GPU: memory.limit means the same on the CPU as on CUDA.
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

// The largest card by size: 1 PiB (the caching allocator model's address span for an expandable
// segment is no smaller); a size of a card (--card, --memory, sweep.predict_for) is at most this.
inline constexpr int64_t kLargestCard = int64_t{1} << 50;

// "12GiB", "512MiB", "1.5GB", "1000B": binary and decimal units up to TiB/TB, case-insensitive,
// always with a unit (every size is memory on a card: "24" was 24 bytes where 24GiB was meant);
// std::invalid_argument naming what it expected, for a bare number the forms it may have meant.
int64_t parse_byte_size(const std::string& text);
// For `text` a number without its unit (0 aside, which no unit makes a size): "'24' has no unit;
// did you mean 24GiB or 24MiB or 24B?", offering the forms with a unit that are read as sizes
// above `above` and at most `at_most`, then `more` ("the card RTX4090"); "give one, e.g. 24GiB"
// where none is. "" for any other text.
std::string no_unit_refusal(const std::string& text, int64_t above = 0,
                            int64_t at_most = kLargestCard,
                            const std::vector<std::string>& more = {});
// The one reading of a size flag (`flag`: "--memory"), above 0, else UserError naming the flag.
int64_t size_flag(const std::string& flag, const std::string& text);

// A size parse_byte_size takes, written as it is shown and typed back: its number as given, no
// spaces, the unit in its own case (" 24 gib" is "24GiB", "1.5gb" "1.5GB").
std::string size_as_written(const std::string& text);

// A byte size as the config writes it: "12GiB", "512MiB", or "1500000000B" (exact, read back by
// the config and by every size flag, those that take a unit included).
std::string byte_size_text(int64_t bytes);

// A size to advise ("a card of at least 1137MiB"): `bytes` rounded up to a whole MiB, written as
// byte_size_text writes it, so that what is typed back is accepted and never below `bytes`; where
// that passes `at_most` (> 0: a bound the advised value may not pass), to a whole KiB, else exact.
std::string size_at_least_text(int64_t bytes, int64_t at_most = 0);

// "1.50 GiB", "512.0 MiB", "12 B": the largest binary unit that keeps the number >= 1.
std::string format_bytes(int64_t bytes);
// Two sizes as format_bytes writes them, or where it writes different ones alike, with the decimals
// that tell them apart ("139.964 MiB" against "139.961 MiB"; to the byte where six do not).
std::pair<std::string, std::string> format_bytes_apart(int64_t a, int64_t b);
// Any number of sizes so: every two that differ are written apart, all in one precision.
std::vector<std::string> format_bytes_apart(const std::vector<int64_t>& sizes);

inline double to_mib(int64_t bytes) {
  return static_cast<double>(bytes) / kMiB;
}
// "12.3": MiB with one decimal, for tables whose header says the unit.
std::string mib_text(int64_t bytes);

}  // namespace training
