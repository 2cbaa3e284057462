// An allocation stream replayed through the model of the CUDA caching allocator
// (caching_allocator.h) with a card's workspaces: the peaks per phase, whether it fits, and the
// smallest limit and largest batch that fit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "training/cards/allocator_snapshot.h"
#include "training/cards/caching_allocator.h"
#include "training/cards/cards.h"
#include "training/cards/linear_stream.h"
#include "training/platform/allocation_trace.h"

namespace training {

struct PhasePeak {
  std::string phase;  // "step2 backward"
  int64_t allocated = 0, reserved = 0;
};

struct Replay {
  bool fits = true;       // no allocation failed
  std::string failed_at;  // the phase of the failed allocation
  int64_t peak_allocated = 0, peak_reserved = 0;
  std::string peak_phase;  // where the allocated peak falls
  std::vector<PhasePeak> phases;
  int64_t retries = 0;
};

// Replays `stream` through the model, the card's workspaces allocated where the first backward
// begins and kept. With `snapshot`, also the allocator at its reserved peak and its events, each in
// its phase ("step2 backward", "held before the first step (weights, batches)", "<phase>: cuBLAS
// workspace").
Replay replay_stream(const AllocationStream& stream, const AllocatorOptions& options,
                     const BesideTensors& beside, AllocatorSnapshot* snapshot = nullptr);

// The smallest allocator limit above `above` bytes, in whole MiB, on which `stream` replays
// without running out (options.limit aside), and that replay in `at_it`. Fitting is not monotone
// in the limit (a lower one can free cached blocks sooner): a step that did not fit under a
// limit is given what it needs above it, never a smaller figure.
int64_t smallest_fitting_limit(const AllocationStream& stream, AllocatorOptions options,
                               const BesideTensors& beside, Replay* at_it, int64_t above = 0);

// What a training run holds on the card beside its step's own tensors.
struct HeldData {
  // The loader's prefetched batches (data.prefetch as on CUDA: auto is 2), each `batch` images
  // (fp32, 3 x image_size x image_size) and their int64 labels.
  int64_t prefetched_batches = 0;
  int64_t image_size = 32;
  // data.device_resident: the tensors the loaders keep on the card from their construction (both
  // splits and the epoch's order, data::device_resident_tensors), bytes each; else empty.
  std::vector<int64_t> resident;
  int64_t resident_bytes() const;
};

// `stream` with `held`'s tensors at `batch` allocated where its "held" mark is (what is held
// before the first step): the resident data first, then the prefetched batches.
AllocationStream with_held_data(AllocationStream stream, int64_t batch, const HeldData& held);

// The largest batch whose replay (with `held`) fits under `options`: one that fits with the next
// not, by doubling from `smallest` (smallest_trainable_batch) then bisection, below the batch at
// which one allocation alone outgrows the limit and at most kMaxBatchSize. Fitting is not monotone
// in the batch (99 can fit, 100 not, 102 again), so the search also goes on up from the largest
// batch of the set `shown` that fits above that edge. 0 when none fits; std::runtime_error when no
// allocation grows.
int64_t largest_fitting_batch(const LinearStream& stream, const HeldData& held,
                              const AllocatorOptions& options, const BesideTensors& beside,
                              int64_t smallest, const std::vector<int64_t>& shown = {});

}  // namespace training
