// An allocation stream: every allocation (its size as requested) and free of a window in order,
// each free naming its allocation, with phase marks; those live when the window opens come first.
// The CPU's tracking allocator records it (memory.h), the card prediction replays it through a
// model of the CUDA caching allocator (cards/card_prediction.h).
//
// It holds the tensors a device would hold, never an operation's own working memory: what an
// operator without an autograd node inside allocates and frees is left out (on the CPU oneDNN's
// scratch, which differs between its AVX2, AVX-512 and AMX kernels; a card's operations keep their
// own, cuDNN's workspaces). Outputs, what autograd saves and what the optimizer keeps stay.
// OperationWatch tells the trace where operations begin and end.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
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

enum class Operation {
  Operator,      // an ATen operator
  AutogradNode,  // an autograd node's evaluation: the operators around it drive autograd
};

class AllocationTrace {
 public:
  void allocated(const void* address, int64_t bytes);  // thread-safe, as the two below
  void freed(const void* address);                     // an address it never saw is ignored
  void mark(const std::string& label);
  // Operations nest, on one thread (OperationWatch's): each end closes the innermost one begun.
  void operation_begins(Operation kind);
  void operation_ends();
  // The stream so far, numbered from 0, each run of frees sorted by allocation number: autograd
  // frees saved tensors in address order, which differs between recordings, and the order inside
  // a run changes no peak or allocator state (a freed block merges with its neighbours anyway).
  AllocationStream stream() const;

 private:
  struct Frame {
    Operation kind = Operation::Operator;
    int64_t first_id = 0;  // the first allocation made inside it
    bool drives_autograd = false;
  };
  mutable std::mutex mutex_;
  std::unordered_map<const void*, int64_t> live_;  // address -> allocation number
  int64_t next_id_ = 0;
  std::vector<Frame> operations_;        // open, outermost first
  std::unordered_set<int64_t> scratch_;  // allocations made and freed inside one operation
  AllocationStream stream_;
};

// While it lives, the ATen operators and autograd nodes this thread runs begin and end operations
// on `trace` (RecordFunction callbacks; the CPU's autograd runs backward on the calling thread).
// One at a time: a second throws std::logic_error.
class OperationWatch {
 public:
  explicit OperationWatch(AllocationTrace& trace);
  ~OperationWatch();
  OperationWatch(const OperationWatch&) = delete;
  OperationWatch& operator=(const OperationWatch&) = delete;

 private:
  uint64_t handle_ = 0;
};

}  // namespace training
