#include "training/studies/memory_model.h"

#include <cmath>
#include <set>

#include "training/config/config.h"

namespace training {

std::optional<int64_t> MemoryFit::max_batch(int64_t bytes) const {
  if (slope <= 0) return std::nullopt;
  const double batches = (static_cast<double>(bytes) - intercept) / slope;
  // The epsilon keeps an exact fit (2000 / 50 = 39.999...) from losing a whole batch; no batch
  // above what training.batch_size takes (and a double beyond int64 casts undefined).
  if (batches < 1) return 0;
  return static_cast<int64_t>(std::min(std::floor(batches + 1e-9), double(kMaxBatchSize)));
}

std::optional<MemoryFit> fit_memory(const std::vector<int64_t>& batches,
                                    const std::vector<int64_t>& peak_bytes) {
  if (batches.size() != peak_bytes.size()) return std::nullopt;
  if (std::set<int64_t>(batches.begin(), batches.end()).size() < 2) return std::nullopt;
  const double n = static_cast<double>(batches.size());
  double mean_x = 0, mean_y = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    mean_x += static_cast<double>(batches[i]) / n;
    mean_y += static_cast<double>(peak_bytes[i]) / n;
  }
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const double dx = static_cast<double>(batches[i]) - mean_x;
    const double dy = static_cast<double>(peak_bytes[i]) - mean_y;
    sxx += dx * dx, sxy += dx * dy, syy += dy * dy;
  }
  MemoryFit fit;
  fit.slope = sxy / sxx;
  fit.intercept = mean_y - fit.slope * mean_x;
  fit.r_squared = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
  fit.points = static_cast<int64_t>(batches.size());
  return fit;
}

}  // namespace training
