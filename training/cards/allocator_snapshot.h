// A replay of the model of the CUDA caching allocator (caching_allocator.h) as PyTorch's memory
// snapshot holds a card's allocator: its segments with their blocks, and its history of events,
// pickled as torch.cuda.memory._dump_snapshot writes it, for PyTorch's viewer
// (`python -m torch.cuda._memory_viz trace_plot FILE -o out.html`, segment_plot, or
// https://pytorch.org/memory_viz). The viewer takes the segments as the state after the last
// event and draws the memory over time by undoing the events from there.
//
// The state is the one at the last moment of the reserved peak, with the events up to it; the
// allocator returns segments only when an allocation would pass its limit, so in a step that fits
// that is its end; where segments are returned after the peak, the later events are `left_out`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "training/cards/caching_allocator.h"

namespace training {

struct AllocatorSnapshot {
  struct Entry {
    AllocatorEvent event;
    size_t phase = 0;  // in `phases`: the part of the step the event fell in
  };
  std::vector<SegmentState> segments;
  std::vector<Entry> trace;
  std::vector<std::string> phases;                   // "step2 backward"
  std::unordered_map<int64_t, size_t> block_phases;  // a block's allocation -> its phase
  int64_t reserved = 0;                              // the segments' bytes: the reserved peak
  int64_t allocated = 0;                             // the allocated blocks' bytes then
  int64_t left_out = 0;                              // events after that moment
  std::string peak_phase;                            // the phase of that moment
};

// Listens to an allocator through a replay (stream_replay.h's replay_stream) and keeps the state
// at the reserved peak's last moment.
class SnapshotRecorder {
 public:
  // Listens to `allocator` from now on, until take(), which must come while it lives.
  void attach(CachingAllocatorModel& allocator);
  // The phase of the events that follow.
  void phase(const std::string& label);
  AllocatorSnapshot take();

 private:
  void heard(const AllocatorEvent& event);
  void keep_state();

  CachingAllocatorModel* allocator_ = nullptr;
  AllocatorSnapshot recorded_;                       // trace and phases of the whole replay
  std::unordered_map<int64_t, size_t> live_phases_;  // a live allocation -> its phase
  AllocatorSnapshot at_peak_;                        // the state kept before a release
  size_t kept_events_ = 0;                           // the events up to it
  bool kept_ = false;
};

// The key and value that mark a snapshot this program wrote: an existing file is replaced only
// when it holds them (an earlier snapshot), never a pickle of the user's own.
inline constexpr const char* kSnapshotWriterKey = "written_by";
inline constexpr const char* kSnapshotWriter = "train memory --card --snapshot";

// The snapshot as the pickle torch.cuda.memory._dump_snapshot writes (protocol 2, LibTorch's
// Pickler as torch::cuda::_memory_snapshot_pickled uses it): {"segments": [...],
// "device_traces": [[...]], "written_by": kSnapshotWriter}, device 0, stream 0. Each event and
// block carries one frame that names its phase, {"filename": source, "line": 0, "name": phase},
// e.g. source "predicted for H200".
std::string snapshot_pickle(const AllocatorSnapshot& snapshot, const std::string& source);

}  // namespace training
