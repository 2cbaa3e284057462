// An allocation stream: every allocation (its size as requested) and free of a window, in order,
// each free naming the allocation it ends, with phase marks. The CPU's tracking allocator records
// it (memory.h, set_trace); the card prediction replays it through a model of the CUDA caching
// allocator (studies/card_prediction.h). Allocations live when the window opens come first, in the
// order they were made.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace training {

struct TraceEvent {
  int64_t id = 0;     // the allocation's number in the trace; a free names the allocation it ends
  int64_t bytes = 0;  // > 0: an allocation of this many bytes; 0: the free of allocation `id`
  bool is_free() const { return bytes == 0; }
};

struct TraceMark {
  size_t event = 0;  // the number of events before the mark
  std::string label;
};

struct AllocationStream {
  std::vector<TraceEvent> events;
  std::vector<TraceMark> marks;
};

class AllocationTrace {
 public:
  void allocated(const void* address, int64_t bytes);  // thread-safe, as the two below
  void freed(const void* address);                     // an address it never saw is ignored
  void mark(const std::string& label);
  // The stream so far, each run of frees (with no allocation or mark between them) sorted by
  // allocation number. Autograd frees a graph's saved tensors in an order that follows their
  // addresses, which differ between recordings; the order inside a run changes no peak, and no
  // caching allocator's state: a freed block merges with its free neighbours in any order.
  AllocationStream stream() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const void*, int64_t> live_;  // address -> allocation number
  int64_t next_id_ = 0;
  AllocationStream stream_;
};

}  // namespace training
