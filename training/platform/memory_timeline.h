// The bytes held after every allocation and free over a window (one step), with marks at phase
// boundaries, fed by device.h's trace_allocations. Beyond max_points neighbours merge pairwise
// keeping the larger, so peaks survive, and later events merge at the same stride.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace training {

class MemoryTimeline {
 public:
  struct Point {
    int64_t event = 0;  // allocation/free number since the start (the last one of a merged group)
    int64_t bytes = 0;  // held after it (the most held over a merged group)
  };
  struct Mark {
    int64_t event = 0;  // the number of events before the mark
    std::string label;
  };

  // `start_bytes`: what is held when the window opens. max_points >= 2.
  MemoryTimeline(int64_t start_bytes, int64_t max_points);

  // One allocation (delta > 0) or free (delta < 0). Thread-safe.
  void add(int64_t delta);
  void mark(const std::string& label);

  std::vector<Point> points() const;
  std::vector<Mark> marks() const;
  int64_t events() const;
  int64_t peak() const;  // the most held at any event (exact, whatever was merged)

 private:
  void push(Point point);

  mutable std::mutex mutex_;
  int64_t max_points_;
  int64_t held_;
  int64_t peak_;
  int64_t events_ = 0;
  int64_t stride_ = 1;  // events per point
  Point pending_;       // the group being merged
  int64_t pending_count_ = 0;
  std::vector<Point> points_;
  std::vector<Mark> marks_;
};

}  // namespace training
