#include "training/cards/stream_replay.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "training/config/config.h"
#include "training/parts/components.h"

namespace training {

namespace {

constexpr const char* kResidentPhase = "resident";  // data.device_resident's tensors

// `stream` with the card's cuBLAS workspaces allocated, and kept, where its first backward phase
// begins: cuBLAS creates them at the first matrix multiply of each thread, autograd's included.
AllocationStream with_workspaces(AllocationStream stream, const BesideTensors& beside) {
  const std::string backward = " backward";
  const auto first = std::find_if(stream.marks.begin(), stream.marks.end(), [&](const auto& m) {
    return m.label.size() > backward.size() &&
           m.label.compare(m.label.size() - backward.size(), backward.size(), backward) == 0;
  });
  if (first == stream.marks.end()) return stream;
  const size_t at = first->event;
  std::vector<TraceEvent> workspaces;
  for (int64_t w = 0; w < beside.workspaces; ++w)
    workspaces.push_back({-1 - w, beside.cublas_workspace});
  for (auto later = first + 1; later != stream.marks.end(); ++later) {
    if (later->event >= at) later->event += workspaces.size();
  }
  stream.events.insert(stream.events.begin() + static_cast<std::ptrdiff_t>(at), workspaces.begin(),
                       workspaces.end());
  return stream;
}

// A phase as the outputs name it: what is held before the first step's marks (the replay's
// "start", the recording's "held") has one name, in the snapshot, failed_in and the peak phase.
std::string phase_name(const std::string& phase) {
  if (phase == "start" || phase == "held") return "held before the first step (weights, batches)";
  if (phase == kResidentPhase) return "held before the first step (data.device_resident's splits)";
  return phase;
}

// An event's phase as a snapshot names it.
std::string snapshot_phase(const std::string& phase, const TraceEvent& event) {
  if (event.id < 0) return phase + ": cuBLAS workspace";
  return phase_name(phase);
}

}  // namespace

Replay replay_stream(const AllocationStream& recorded, const AllocatorOptions& options,
                     const BesideTensors& beside, AllocatorSnapshot* snapshot) {
  const AllocationStream stream = with_workspaces(recorded, beside);
  CachingAllocatorModel allocator(options);
  SnapshotRecorder recorder;
  if (snapshot) recorder.attach(allocator);
  Replay replay;
  std::string phase = "start";
  size_t next_mark = 0;
  PhasePeak current{phase, 0, 0};
  auto close_phase = [&] {
    if (current.phase != "held" && current.phase != "start" && current.phase != kResidentPhase)
      replay.phases.push_back(current);
  };
  auto open_phase = [&](const std::string& label) {
    close_phase();
    phase = label;
    current = {label, allocator.stats().allocated, allocator.stats().reserved};
  };
  for (size_t i = 0; i <= stream.events.size() && replay.fits; ++i) {
    while (next_mark < stream.marks.size() && stream.marks[next_mark].event == i) {
      open_phase(stream.marks[next_mark++].label);
    }
    if (i == stream.events.size()) break;
    const auto& event = stream.events[i];
    if (snapshot) recorder.phase(snapshot_phase(phase, event));
    if (event.is_free()) {
      allocator.free(event.id);
    } else if (!allocator.allocate(event.id, event.bytes)) {
      replay.fits = false;
      replay.failed_at = phase_name(phase);
      break;
    }
    const auto& stats = allocator.stats();
    current.allocated = std::max(current.allocated, stats.allocated);
    current.reserved = std::max(current.reserved, stats.reserved);
    if (stats.allocated > replay.peak_allocated) {
      replay.peak_allocated = stats.allocated;
      replay.peak_phase = phase_name(phase);
    }
  }
  close_phase();
  replay.peak_reserved = allocator.stats().peak_reserved;
  replay.retries = allocator.stats().retries;
  if (snapshot) *snapshot = recorder.take();
  return replay;
}

int64_t HeldData::resident_bytes() const {
  return std::accumulate(resident.begin(), resident.end(), int64_t{0});
}

AllocationStream with_held_data(AllocationStream stream, int64_t batch, const HeldData& held) {
  size_t at = 0;
  for (const auto& mark : stream.marks) {
    if (mark.label == "held") at = mark.event;
  }
  int64_t next_id = 0;
  for (const auto& event : stream.events) next_id = std::max(next_id, event.id + 1);
  std::vector<TraceEvent> added;
  const auto [images, labels] = batch_bytes(batch, held.image_size);
  for (int64_t i = 0; i < held.prefetched_batches; ++i) {
    added.push_back({next_id++, images});
    added.push_back({next_id++, labels});
  }
  const size_t resident_at = at + added.size();  // a phase of their own: said where they fail
  for (const int64_t bytes : held.resident) added.push_back({next_id++, bytes});
  stream.events.insert(stream.events.begin() + static_cast<std::ptrdiff_t>(at), added.begin(),
                       added.end());
  for (auto& mark : stream.marks) {
    if (mark.event >= at) mark.event += added.size();
  }
  if (!held.resident.empty()) {
    const auto later = std::find_if(stream.marks.begin(), stream.marks.end(),
                                    [&](const TraceMark& m) { return m.event > resident_at; });
    const auto resident = stream.marks.insert(later, {resident_at, kResidentPhase});
    // The phase it interrupted goes on after it.
    const std::string before = resident == stream.marks.begin() ? "start" : (resident - 1)->label;
    stream.marks.insert(resident + 1, {resident_at + held.resident.size(), before});
  }
  return stream;
}

int64_t largest_fitting_batch(const LinearStream& stream, const HeldData& held,
                              const AllocatorOptions& options, const BesideTensors& beside,
                              int64_t smallest, const std::vector<int64_t>& shown) {
  auto fits = [&](int64_t batch) {
    return replay_stream(with_held_data(stream.at(batch), batch, held), options, beside).fits;
  };
  const auto beyond = stream.first_batch_over(options.limit);
  if (!beyond) throw std::runtime_error("no allocation of the step grows with the batch");
  // No larger than training.batch_size takes (a 1024TiB card would give billions).
  const int64_t ceiling = std::min(*beyond, kMaxBatchSize + 1);
  // From a batch that fits: doubling, then bisection, to one that fits with the next not fitting.
  auto edge_above = [&](int64_t good) {
    int64_t bad = std::min<int64_t>(2 * good, ceiling);
    while (bad < ceiling && fits(bad)) good = bad, bad = std::min(bad * 2, ceiling);
    while (bad - good > 1) {
      const int64_t middle = good + (bad - good) / 2;
      (fits(middle) ? good : bad) = middle;
    }
    return good;
  };
  const int64_t edge = ceiling > smallest && fits(smallest) ? edge_above(smallest) : 0;
  // The largest batch shown above that edge that fits, if any: the search goes on up from it.
  std::vector<int64_t> above;
  for (const int64_t batch : shown) {
    if (batch > edge && batch >= smallest && batch < ceiling) above.push_back(batch);
  }
  std::sort(above.rbegin(), above.rend());
  above.erase(std::unique(above.begin(), above.end()), above.end());
  for (const int64_t batch : above) {
    if (fits(batch)) return edge_above(batch);
  }
  return edge;
}

int64_t smallest_fitting_limit(const AllocationStream& stream, AllocatorOptions options,
                               const BesideTensors& beside, Replay* at_it, int64_t above) {
  auto replay_at = [&](int64_t mib) {
    options.limit = mib * kMiB;
    return replay_stream(stream, options, beside);
  };
  const int64_t floor_mib = above / kMiB;  // taken as not fitting: the result is above it
  options.limit = 0;  // without a limit nothing cached is freed: a limit that surely fits
  int64_t good = std::max<int64_t>(
      floor_mib + 1, (replay_stream(stream, options, beside).peak_reserved + kMiB - 1) / kMiB);
  Replay best = replay_at(good);
  while (!best.fits && good < (int64_t{1} << 30)) best = replay_at(good *= 2);  // to 1 PiB
  // Below the allocated peak nothing fits (reserved holds it): the search starts there.
  for (int64_t bad =
           std::max(floor_mib, std::min(good - 1, (best.peak_allocated + kMiB - 1) / kMiB - 1));
       good - bad > 1;) {
    const int64_t middle = bad + (good - bad) / 2;
    Replay r = replay_at(middle);
    if (r.fits) {
      good = middle;
      best = std::move(r);
    } else {
      bad = middle;
    }
  }
  if (at_it) *at_it = std::move(best);
  return good * kMiB;
}

}  // namespace training
