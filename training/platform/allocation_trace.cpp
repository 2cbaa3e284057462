#include "training/platform/allocation_trace.h"

#include <algorithm>

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
  stream_.events.push_back({found->second, 0});
  live_.erase(found);
}

void AllocationTrace::mark(const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  stream_.marks.push_back({stream_.events.size(), label});
}

AllocationStream AllocationTrace::stream() const {
  std::lock_guard<std::mutex> lock(mutex_);
  AllocationStream stream = stream_;
  auto& events = stream.events;
  auto mark = stream.marks.begin();
  for (size_t begin = 0; begin < events.size();) {
    while (mark != stream.marks.end() && mark->event <= begin) ++mark;
    const size_t stop = mark == stream.marks.end() ? events.size() : mark->event;
    size_t end = begin;
    while (end < stop && events[end].is_free()) ++end;
    std::sort(events.begin() + static_cast<std::ptrdiff_t>(begin),
              events.begin() + static_cast<std::ptrdiff_t>(end),
              [](const TraceEvent& a, const TraceEvent& b) { return a.id < b.id; });
    begin = end == begin ? begin + 1 : end;
  }
  return stream;
}

}  // namespace training
