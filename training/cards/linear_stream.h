// An allocation stream scaled in the batch: each allocation's size taken as linear in the batch
// from two recordings, and checked on a third. Pure arithmetic on the stream (no LibTorch).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "training/platform/allocation_trace.h"

namespace training {

// A stream whose allocation sizes are linear in the batch, from its recordings at batches a < b.
struct LinearStream {
  AllocationStream at_a;
  std::vector<int64_t> slope_numerator;  // per event: size(b) - size(a)
  int64_t a = 0, b = 0;
  // The stream at `batch` (>= 1): each size a + (size(b) - size(a)) * (batch - a) / (b - a),
  // rounded up to whole bytes.
  AllocationStream at(int64_t batch) const;
  // The first batch at which one allocation alone is larger than `bytes` (at most 2^50, a card's
  // largest); none when no allocation grows with the batch.
  std::optional<int64_t> first_batch_over(int64_t bytes) const;
};

// Throws std::runtime_error naming the first event where the two recordings differ in order.
LinearStream linear_stream(const AllocationStream& at_a, int64_t a, const AllocationStream& at_b,
                           int64_t b);
// How many allocations of `recorded` (at `batch`) differ in size from `stream.at(batch)`; -1 when
// the order of events differs.
int64_t mismatched_allocations(const LinearStream& stream, const AllocationStream& recorded,
                               int64_t batch);

}  // namespace training
