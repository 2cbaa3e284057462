#include "training/cards/allocator_snapshot.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <tuple>

namespace training {

void SnapshotRecorder::attach(CachingAllocatorModel& allocator) {
  allocator_ = &allocator;
  allocator.set_listener([this](const AllocatorEvent& event) { heard(event); });
}

void SnapshotRecorder::phase(const std::string& label) {
  if (recorded_.phases.empty() || recorded_.phases.back() != label) {
    recorded_.phases.push_back(label);
  }
}

void SnapshotRecorder::heard(const AllocatorEvent& event) {
  using Action = AllocatorEvent::Action;
  if (recorded_.phases.empty()) phase("start");
  const AllocatorStats& stats = allocator_->stats();
  // A release is heard before it: the state still holds the segment.
  const bool release = event.action == Action::SegmentFree || event.action == Action::SegmentUnmap;
  if (release && stats.reserved == stats.peak_reserved) keep_state();
  const size_t phase = recorded_.phases.size() - 1;
  if (event.action == Action::Alloc) live_phases_[event.id] = phase;
  if (event.action == Action::Free) live_phases_.erase(event.id);
  recorded_.trace.push_back({event, phase});
}

void SnapshotRecorder::keep_state() {
  at_peak_.segments = allocator_->segments();
  at_peak_.block_phases = live_phases_;
  at_peak_.reserved = allocator_->stats().reserved;
  at_peak_.allocated = allocator_->stats().allocated;
  at_peak_.peak_phase = recorded_.phases.back();
  kept_events_ = recorded_.trace.size();
  kept_ = true;
}

AllocatorSnapshot SnapshotRecorder::take() {
  TORCH_INTERNAL_ASSERT(allocator_, "a snapshot recorder that never listened");
  allocator_->set_listener(nullptr);
  const AllocatorStats& stats = allocator_->stats();
  if (stats.reserved == stats.peak_reserved || !kept_) {
    keep_state();  // the end is the peak's last moment
  }
  TORCH_INTERNAL_ASSERT(at_peak_.reserved == stats.peak_reserved,
                        "the state kept is not the reserved peak's");
  AllocatorSnapshot snapshot = std::move(at_peak_);
  snapshot.phases = std::move(recorded_.phases);
  snapshot.left_out = static_cast<int64_t>(recorded_.trace.size() - kept_events_);
  recorded_.trace.resize(kept_events_);
  snapshot.trace = std::move(recorded_.trace);
  allocator_ = nullptr;
  return snapshot;
}

namespace {

using c10::IValue;
using Dict = c10::Dict<IValue, IValue>;
using List = c10::List<IValue>;

Dict new_dict() {
  return Dict(c10::AnyType::get(), c10::AnyType::get());
}

List new_list() {
  return List(c10::AnyType::get());
}

const char* action_name(AllocatorEvent::Action action) {
  static const char* const names[] = {"segment_alloc", "segment_free", "segment_map",
                                      "segment_unmap", "alloc",        "free_completed"};
  return names[static_cast<int>(action)];
}

// A trace entry (TraceEntry: action, addr, size, stream, frames).
Dict trace_entry(const std::string& action, const AllocatorEvent& event, const List& frames) {
  Dict entry = new_dict();
  entry.insert("action", action);
  entry.insert("addr", event.address);
  entry.insert("size", event.size);
  entry.insert("stream", int64_t{0});
  entry.insert("frames", frames);
  return entry;
}

// A segment (SegmentInfo) with its blocks (BlockInfo), as _memory_snapshot_pickled writes them.
Dict segment_dict(const SegmentState& segment, const AllocatorSnapshot& snapshot,
                  const std::vector<List>& frames) {
  List blocks = new_list();
  int64_t allocated = 0, requested = 0;
  for (const BlockState& b : segment.blocks) {
    Dict block = new_dict();
    block.insert("address", b.address);
    block.insert("size", b.size);
    block.insert("requested_size", b.requested);
    block.insert("state", b.allocated ? "active_allocated" : "inactive");
    const auto phase = snapshot.block_phases.find(b.id);
    block.insert("frames", b.allocated && phase != snapshot.block_phases.end()
                               ? frames[phase->second]
                               : new_list());
    blocks.push_back(block);
    allocated += b.allocated ? b.size : 0;
    requested += b.requested;
  }
  Dict dict = new_dict();
  dict.insert("device", int64_t{0});
  dict.insert("address", segment.address);
  dict.insert("total_size", segment.size);
  dict.insert("allocated_size", allocated);
  dict.insert("active_size", allocated);
  dict.insert("requested_size", requested);
  dict.insert("stream", int64_t{0});
  dict.insert("segment_type", segment.small ? "small" : "large");
  dict.insert("segment_pool_id", std::make_tuple(int64_t{0}, int64_t{0}));
  dict.insert("is_expandable", segment.expandable);
  dict.insert("frames", new_list());
  dict.insert("blocks", blocks);
  return dict;
}

}  // namespace

std::string snapshot_pickle(const AllocatorSnapshot& snapshot, const std::string& source) {
  std::vector<List> frames;  // one a phase
  for (const std::string& phase : snapshot.phases) {
    Dict frame = new_dict();
    frame.insert("filename", source);
    frame.insert("line", int64_t{0});
    frame.insert("name", phase);
    List list = new_list();
    list.push_back(frame);
    frames.push_back(list);
  }
  List segments = new_list();
  for (const SegmentState& segment : snapshot.segments) {
    segments.push_back(segment_dict(segment, snapshot, frames));
  }
  // A free is requested and completed at once: no other stream holds the block.
  List trace = new_list();
  for (const auto& [event, phase] : snapshot.trace) {
    if (event.action == AllocatorEvent::Action::Free) {
      trace.push_back(trace_entry("free_requested", event, frames[phase]));
    }
    trace.push_back(trace_entry(action_name(event.action), event, frames[phase]));
  }
  List device_traces = new_list();
  device_traces.push_back(trace);
  Dict root = new_dict();
  root.insert("segments", segments);
  root.insert("device_traces", device_traces);
  root.insert(kSnapshotWriterKey, std::string(kSnapshotWriter));  // PyTorch's viewer ignores it

  std::string pickled;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { pickled.append(data, size); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(root);
  pickler.stop();
  return pickled;
}

}  // namespace training
