// The memory model of a sweep cell: a least-squares line peak = a + b * batch through the
// measured trials, its R², and what it predicts for cards that are not here.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace training {

struct MemoryFit {
  double intercept = 0;  // a: bytes independent of the batch (weights, gradients, state)
  double slope = 0;      // b: bytes per sample (activations)
  double r_squared = 0;  // 1 = the points lie on the line
  int64_t points = 0;

  double predict(int64_t batch) const { return intercept + slope * static_cast<double>(batch); }
  // The largest batch whose predicted peak fits in `bytes` (0 when not even one sample does;
  // nullopt when the slope is not positive, i.e. memory does not grow with the batch).
  std::optional<int64_t> max_batch(int64_t bytes) const;
};

// Needs at least two distinct batch sizes; nullopt otherwise.
std::optional<MemoryFit> fit_memory(const std::vector<int64_t>& batches,
                                    const std::vector<int64_t>& peak_bytes);

}  // namespace training
