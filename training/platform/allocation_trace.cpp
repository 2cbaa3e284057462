#include "training/platform/allocation_trace.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>

namespace training {

void AllocationTrace::allocated(const void* address, int64_t bytes) {
  if (bytes <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t id = next_id_++;
  live_[address] = id;
  stream_.events.push_back({id, bytes});
}

void AllocationTrace::freed(const void* address) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = live_.find(address);
  if (found == live_.end()) return;
  const int64_t id = found->second;
  live_.erase(found);
  // The innermost operation open since before the allocation was made: when it is an operator,
  // the allocation lived and died inside it.
  for (auto frame = operations_.rbegin(); frame != operations_.rend(); ++frame) {
    if (frame->first_id > id) continue;
    if (frame->kind == Operation::Operator && !frame->drives_autograd) {
      scratch_.insert(id);
      return;
    }
    break;
  }
  stream_.events.push_back({id, 0});
}

void AllocationTrace::mark(const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  stream_.marks.push_back({stream_.events.size(), label});
}

void AllocationTrace::operation_begins(Operation kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (kind == Operation::AutogradNode) {
    for (auto& frame : operations_) frame.drives_autograd = true;
  }
  operations_.push_back({kind, next_id_, false});
}

void AllocationTrace::operation_ends() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!operations_.empty()) operations_.pop_back();
}

AllocationStream AllocationTrace::stream() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Without the scratch, renumbered densely in order, the marks moved with their events.
  AllocationStream stream;
  std::unordered_map<int64_t, int64_t> number;
  auto mark = stream_.marks.begin();
  for (size_t i = 0; i <= stream_.events.size(); ++i) {
    for (; mark != stream_.marks.end() && mark->event == i; ++mark) {
      stream.marks.push_back({stream.events.size(), mark->label});
    }
    if (i == stream_.events.size()) break;
    const TraceEvent& event = stream_.events[i];
    if (event.is_free()) {
      stream.events.push_back({number.at(event.id), 0});
    } else if (scratch_.count(event.id) == 0) {
      const auto id = static_cast<int64_t>(number.size());
      number[event.id] = id;
      stream.events.push_back({id, event.bytes});
    }
  }
  auto& events = stream.events;
  auto next = stream.marks.begin();
  for (size_t begin = 0; begin < events.size();) {
    while (next != stream.marks.end() && next->event <= begin) ++next;
    const size_t stop = next == stream.marks.end() ? events.size() : next->event;
    size_t end = begin;
    while (end < stop && events[end].is_free()) ++end;
    std::sort(events.begin() + static_cast<std::ptrdiff_t>(begin),
              events.begin() + static_cast<std::ptrdiff_t>(end),
              [](const TraceEvent& a, const TraceEvent& b) { return a.id < b.id; });
    begin = end == begin ? begin + 1 : end;
  }
  return stream;
}

namespace {

std::atomic<AllocationTrace*> watched{nullptr};
std::atomic<std::thread::id> watching_thread{};

std::unique_ptr<at::ObserverContext> begin_operation(const at::RecordFunction& fn) {
  AllocationTrace* trace = watched.load();
  if (trace && std::this_thread::get_id() == watching_thread.load()) {
    trace->operation_begins(fn.scope() == at::RecordScope::BACKWARD_FUNCTION
                                ? Operation::AutogradNode
                                : Operation::Operator);
  }
  return nullptr;
}

void end_operation(const at::RecordFunction& /*fn*/, at::ObserverContext* /*context*/) {
  AllocationTrace* trace = watched.load();
  if (trace && std::this_thread::get_id() == watching_thread.load()) trace->operation_ends();
}

}  // namespace

OperationWatch::OperationWatch(AllocationTrace& trace) {
  AllocationTrace* none = nullptr;
  if (!watched.compare_exchange_strong(none, &trace)) {
    throw std::logic_error("OperationWatch: another trace is watched");
  }
  watching_thread.store(std::this_thread::get_id());
  try {
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&begin_operation, &end_operation)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  } catch (...) {
    watched.store(nullptr);
    throw;
  }
}

OperationWatch::~OperationWatch() {
  at::removeCallback(handle_);
  watched.store(nullptr);
}

}  // namespace training
