#include "training/platform/memory_timeline.h"

#include <algorithm>
#include <stdexcept>

namespace training {

MemoryTimeline::MemoryTimeline(int64_t start_bytes, int64_t max_points)
    : max_points_(max_points), held_(start_bytes), peak_(start_bytes) {
  if (max_points < 2) throw std::invalid_argument("a memory timeline needs max_points >= 2");
  points_.push_back({0, start_bytes});
}

void MemoryTimeline::add(int64_t delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_ += delta;
  peak_ = std::max(peak_, held_);
  ++events_;
  pending_.event = events_;
  pending_.bytes = pending_count_ == 0 ? held_ : std::max(pending_.bytes, held_);
  if (++pending_count_ == stride_) {
    push(pending_);
    pending_count_ = 0;
  }
}

void MemoryTimeline::push(Point point) {
  points_.push_back(point);
  if (static_cast<int64_t>(points_.size()) < max_points_) return;
  // Full: merge neighbours pairwise (keeping the first point, the window's start, as it is).
  std::vector<Point> merged = {points_.front()};
  for (size_t i = 1; i + 1 < points_.size(); i += 2) {
    merged.push_back({points_[i + 1].event, std::max(points_[i].bytes, points_[i + 1].bytes)});
  }
  if (points_.size() % 2 == 0) merged.push_back(points_.back());  // an odd one out stays
  points_ = std::move(merged);
  stride_ *= 2;
}

void MemoryTimeline::mark(const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  marks_.push_back({events_, label});
}

std::vector<MemoryTimeline::Point> MemoryTimeline::points() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Point> points = points_;
  if (pending_count_ > 0) points.push_back(pending_);
  return points;
}

std::vector<MemoryTimeline::Mark> MemoryTimeline::marks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return marks_;
}

int64_t MemoryTimeline::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

int64_t MemoryTimeline::peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

}  // namespace training
