// A replay as PyTorch's memory snapshot holds it: the segments are the allocator's at its reserved
// peak, the trace leads to them (PyTorch's viewer undoes the trace from the segments), and each
// event names its phase.
#include "training/cards/allocator_snapshot.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "training/cards/stream_replay.h"
#include "training/platform/memory.h"

namespace training {
namespace {

using Action = AllocatorEvent::Action;

// What the trace leads to from an empty allocator, as the viewer reads it: the address ranges
// with memory (contiguous ones as one, as snapshot() reports an expandable segment's) and the
// allocations live (address -> bytes requested).
struct Rebuilt {
  std::map<int64_t, int64_t> segments, blocks;
};

Rebuilt rebuild(const AllocatorSnapshot& snapshot) {
  Rebuilt r;
  for (const auto& [e, phase] : snapshot.trace) {
    switch (e.action) {
      case Action::SegmentAlloc:
      case Action::SegmentMap:
        r.segments[e.address] = e.size;
        break;
      case Action::SegmentFree:
        EXPECT_EQ(r.segments.erase(e.address), 1u) << "a segment freed that was not held";
        break;
      case Action::SegmentUnmap: {  // a range inside one held: what is left either side stays
        auto it = r.segments.upper_bound(e.address);
        if (it == r.segments.begin() ||
            std::prev(it)->first + std::prev(it)->second < e.address + e.size) {
          ADD_FAILURE() << "an unmapped range that was not mapped: " << e.address;
          break;
        }
        const auto [start, size] = *--it;
        r.segments.erase(it);
        if (start < e.address) r.segments[start] = e.address - start;
        if (e.address + e.size < start + size)
          r.segments[e.address + e.size] = start + size - e.address - e.size;
        break;
      }
      case Action::Alloc:
        r.blocks[e.address] = e.size;
        break;
      case Action::Free:
        EXPECT_EQ(r.blocks.erase(e.address), 1u) << "a block freed that was not allocated";
        break;
    }
  }
  for (auto it = r.segments.begin(); it != r.segments.end();) {  // contiguous ranges as one
    const auto next = std::next(it);
    if (next != r.segments.end() && it->first + it->second == next->first) {
      it->second += next->second;
      r.segments.erase(next);
    } else {
      it = next;
    }
  }
  return r;
}

// The snapshot's own segments and allocated blocks, each segment tiled by its blocks.
Rebuilt listed(const AllocatorSnapshot& snapshot) {
  Rebuilt r;
  for (const SegmentState& s : snapshot.segments) {
    r.segments[s.address] = s.size;
    int64_t at = s.address;
    for (const BlockState& b : s.blocks) {
      EXPECT_EQ(b.address, at) << "the blocks do not tile segment " << s.address;
      at += b.size;
      if (b.allocated) r.blocks[b.address] = b.requested;
    }
    EXPECT_EQ(at, s.address + s.size);
  }
  return r;
}

int64_t total(const std::vector<SegmentState>& segments) {
  int64_t bytes = 0;
  for (const auto& s : segments) bytes += s.size;
  return bytes;
}

// A stream of allocations from 100 B to 80 MiB and frees in random order, with phase marks.
AllocationStream random_stream(uint32_t seed) {
  std::mt19937 random(seed);
  AllocationStream stream;
  std::vector<int64_t> live;
  const int64_t sizes[] = {100, 4000, 300000, 3 * kMiB, 12 * kMiB, 20 * kMiB};
  for (int64_t id = 0; stream.events.size() < 3000;) {
    if (stream.events.size() % 500 == 0) {
      stream.marks.push_back({stream.events.size(), "step" + std::to_string(id) + " forward"});
    }
    if (live.size() < 5 && (live.empty() || random() % 2 == 0)) {
      const int64_t size = sizes[random() % 6];  // the largest from 20 to 80 MiB
      stream.events.push_back({id, size + static_cast<int64_t>(random() % (size / 10 * 30))});
      live.push_back(id++);
    } else {
      const size_t i = random() % live.size();
      stream.events.push_back({live[i], 0});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return stream;
}

// Plain, under a limit with max_split_size_mb (segments returned), and expandable segments
// (ranges mapped and unmapped): the segments' total is the reserved peak, and the trace leads to
// the segments and blocks listed.
TEST(AllocatorSnapshot, TheSegmentsAreTheReservedPeakAndTheTraceLeadsToThem) {
  AllocatorOptions limited;
  limited.limit = 512 * kMiB;
  limited.max_split_size = 20 * kMiB;
  AllocatorOptions expandable;
  expandable.expandable_segments = true;
  expandable.limit = 270 * kMiB;
  expandable.device_memory = 16384 * kMiB;
  for (const AllocatorOptions& options : {AllocatorOptions{}, limited, expandable}) {
    int64_t released = 0;
    for (uint32_t seed : {1u, 2u, 3u}) {
      AllocatorSnapshot snapshot;
      const Replay replay = replay_stream(random_stream(seed), options, {}, &snapshot);
      ASSERT_TRUE(replay.fits) << "seed " << seed << ", limit " << options.limit << ": "
                               << replay.failed_at;
      EXPECT_EQ(total(snapshot.segments), replay.peak_reserved);
      EXPECT_EQ(snapshot.reserved, replay.peak_reserved);
      const Rebuilt from_trace = rebuild(snapshot), held = listed(snapshot);
      EXPECT_EQ(from_trace.segments, held.segments) << "seed " << seed;
      EXPECT_EQ(from_trace.blocks, held.blocks) << "seed " << seed;
      int64_t allocated = 0;
      for (const auto& s : snapshot.segments) {
        EXPECT_EQ(s.expandable, options.expandable_segments);
        for (const auto& b : s.blocks) allocated += b.allocated ? b.size : 0;
      }
      EXPECT_EQ(allocated, snapshot.allocated);
      released += snapshot.left_out;  // segments returned, or pages unmapped
      for (const auto& entry : snapshot.trace) {
        released +=
            entry.event.action == Action::SegmentFree || entry.event.action == Action::SegmentUnmap;
      }
    }
    if (options == AllocatorOptions{}) {  // without a limit nothing is returned
      EXPECT_EQ(released, 0);
    } else {
      EXPECT_GT(released, 0) << "the limit was never reached: too high";
    }
  }
}

// release_available_cached_blocks: under max_split_size_mb a 12 MiB request may not take the
// cached 30 MiB block, and a new segment would pass the 40 MiB limit, so the cached segment goes.
// The reserved peak (30 MiB) was before: the snapshot holds that segment, free, and leaves out the
// three events after it.
TEST(AllocatorSnapshot, WhereSegmentsAreReturnedAfterThePeakItEndsAtThePeak) {
  AllocatorOptions options;
  options.limit = 40 * kMiB;
  options.max_split_size = 20 * kMiB;
  CachingAllocatorModel allocator(options);
  SnapshotRecorder recorder;
  recorder.attach(allocator);
  recorder.phase("step1 forward");
  ASSERT_TRUE(allocator.allocate(1, 30 * kMiB));
  allocator.free(1);
  recorder.phase("step1 backward");
  ASSERT_TRUE(allocator.allocate(2, 12 * kMiB));
  EXPECT_EQ(allocator.stats().reserved, 12 * kMiB);
  const AllocatorSnapshot snapshot = recorder.take();
  EXPECT_EQ(snapshot.reserved, 30 * kMiB);
  ASSERT_EQ(snapshot.segments.size(), 1u);
  ASSERT_EQ(snapshot.segments[0].blocks.size(), 1u);
  EXPECT_FALSE(snapshot.segments[0].blocks[0].allocated);
  EXPECT_EQ(snapshot.segments[0].size, 30 * kMiB);
  ASSERT_EQ(snapshot.trace.size(), 3u);
  EXPECT_EQ(snapshot.trace[0].event.action, Action::SegmentAlloc);
  EXPECT_EQ(snapshot.trace[1].event.action, Action::Alloc);
  EXPECT_EQ(snapshot.trace[2].event.action, Action::Free);
  EXPECT_EQ(snapshot.left_out, 3);  // segment_free, segment_alloc, alloc
  EXPECT_EQ(snapshot.peak_phase, "step1 backward");
  ASSERT_EQ(snapshot.phases.size(), 2u);
  EXPECT_EQ(snapshot.phases[snapshot.trace[2].phase], "step1 forward");
}

// Each event carries its phase: what is held before the first step, the step's phases, the
// card's workspaces at the first backward; a block its allocation's phase. The pickle is
// protocol 2 (read by Python in CardSnapshot's tests).
TEST(AllocatorSnapshot, EachEventAndBlockNamesItsPhase) {
  AllocationStream stream;
  stream.events = {{0, 1000}, {1, 5000}, {2, 7000}, {1, 0}, {3, 9000}};
  stream.marks = {{1, "held"}, {1, "step1 forward"}, {3, "step1 backward"}};
  BesideTensors beside;
  beside.cublas_workspace = 8 * kMiB;
  beside.workspaces = 1;
  AllocatorSnapshot snapshot;
  replay_stream(stream, {}, beside, &snapshot);
  std::vector<std::string> phases;
  for (const auto& entry : snapshot.trace) {
    if (entry.event.action == Action::Alloc) phases.push_back(snapshot.phases[entry.phase]);
  }
  EXPECT_EQ(phases, (std::vector<std::string>{
                        "held before the first step (weights, batches)", "step1 forward",
                        "step1 forward", "step1 backward: cuBLAS workspace", "step1 backward"}));
  std::map<int64_t, std::string> block_phases;  // requested bytes -> phase
  for (const auto& s : snapshot.segments) {
    for (const auto& b : s.blocks) {
      if (b.allocated) block_phases[b.requested] = snapshot.phases[snapshot.block_phases.at(b.id)];
    }
  }
  EXPECT_EQ(block_phases,
            (std::map<int64_t, std::string>{{1000, "held before the first step (weights, batches)"},
                                            {7000, "step1 forward"},
                                            {8 * kMiB, "step1 backward: cuBLAS workspace"},
                                            {9000, "step1 backward"}}));
  const std::string pickled = snapshot_pickle(snapshot, "predicted for T4");
  ASSERT_GE(pickled.size(), 3u);
  EXPECT_EQ(static_cast<unsigned char>(pickled[0]), 0x80);
  EXPECT_EQ(pickled[1], 2);
  EXPECT_EQ(pickled.back(), '.');  // STOP
}

}  // namespace
}  // namespace training
