#include "training/platform/memory_timeline.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

#include "training/platform/device.h"

namespace {

using training::MemoryTimeline;

int64_t max_bytes(const std::vector<MemoryTimeline::Point>& points) {
  int64_t most = 0;
  for (const auto& p : points) most = std::max(most, p.bytes);
  return most;
}

TEST(MemoryTimeline, KeepsEveryEventWhileThereIsRoom) {
  MemoryTimeline timeline(100, 16);
  timeline.add(50);
  timeline.mark("middle");
  timeline.add(-120);
  const auto points = timeline.points();
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[0].bytes, 100);
  EXPECT_EQ(points[1].event, 1);
  EXPECT_EQ(points[1].bytes, 150);
  EXPECT_EQ(points[2].bytes, 30);
  ASSERT_EQ(timeline.marks().size(), 1u);
  EXPECT_EQ(timeline.marks()[0].event, 1);
  EXPECT_EQ(timeline.marks()[0].label, "middle");
  EXPECT_EQ(timeline.peak(), 150);
}

// Beyond max_points the points merge pairwise keeping the larger: the size stays bounded, the
// peak survives, events stay in order and the last event is always there.
TEST(MemoryTimeline, StaysBoundedAndKeepsThePeak) {
  MemoryTimeline timeline(0, 16);
  for (int i = 0; i < 1000; ++i) timeline.add(i == 613 ? 5000 : (i % 2 == 0 ? 10 : -9));
  for (int i = 0; i < 337; ++i) timeline.add(-1);
  const auto points = timeline.points();
  EXPECT_LE(points.size(), 17u);  // the bound, plus the group being merged
  EXPECT_EQ(timeline.events(), 1337);
  EXPECT_EQ(max_bytes(points), timeline.peak());
  EXPECT_EQ(points.back().event, 1337);
  for (size_t i = 1; i < points.size(); ++i) EXPECT_LT(points[i - 1].event, points[i].event);
}

// The CPU's tracking allocator feeds a timeline with every tensor it counts, until stopped.
TEST(MemoryTimeline, TheCpuAllocatorFeedsIt) {
  const torch::Device cpu(torch::kCPU);
  MemoryTimeline timeline(training::memory_stats(cpu).allocated, 64);
  training::trace_allocations(cpu, &timeline);
  {
    auto a = torch::empty({1 << 18}, torch::kFloat32);  // 1 MiB
    auto b = torch::empty({1 << 16}, torch::kFloat32);  // 256 KiB
  }
  training::trace_allocations(cpu, nullptr);
  auto c = torch::empty({1 << 20}, torch::kFloat32);  // not traced
  EXPECT_EQ(timeline.events(), 4);
  const auto points = timeline.points();
  EXPECT_EQ(points[2].bytes - points[0].bytes, (1 << 20) + (1 << 18));
  EXPECT_EQ(points[4].bytes, points[0].bytes);
}

}  // namespace
