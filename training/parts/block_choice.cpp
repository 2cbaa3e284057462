// checkpointing.enabled: auto's choice of blocks for a budget (checkpoint_choice.h): the
// predicted peak of a set, and the cheapest set within a budget, a knapsack over the blocks.
#include <algorithm>
#include <limits>

#include "training/parts/checkpoint_choice.h"

namespace training {

int64_t predicted_peak(const BlockMeasurement& m, const std::vector<bool>& recomputed) {
  int64_t peak = 0;
  for (const auto& window : m.windows) {
    int64_t held = window.peak;
    for (int64_t i = 0; i < window.blocks_before; ++i) {
      if (!recomputed.at(static_cast<size_t>(i)))
        held += m.blocks[static_cast<size_t>(i)].kept_bytes;
    }
    peak = std::max(peak, held);
  }
  return peak;
}

namespace {

constexpr int64_t kUnits = 65536;  // the resolution of the byte counts the choice works on
constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

// What keeping a set of blocks is worth: their recomputation avoided, then their count.
struct Kept {
  double seconds = -1;  // < 0: no set reaches this state
  int64_t count = 0;
  bool reached() const { return seconds >= 0; }
  bool better_than(const Kept& other) const {
    if (!other.reached()) return reached();
    if (seconds != other.seconds) return seconds > other.seconds;
    return count > other.count;
  }
};

// limit[k]: the most bytes the kept blocks among the first k may hold, from every window that
// holds them (a window holding the first j >= k holds the first k too).
std::vector<int64_t> prefix_limits(const BlockMeasurement& m, int64_t budget) {
  const size_t n = m.blocks.size();
  std::vector<int64_t> limit(n + 1, kNoLimit);
  for (const auto& window : m.windows) {
    auto& slot = limit.at(static_cast<size_t>(window.blocks_before));
    slot = std::min(slot, budget - window.peak);
  }
  for (size_t k = n; k-- > 0;) limit[k] = std::min(limit[k], limit[k + 1]);
  return limit;
}

}  // namespace

CheckpointChoice choose_blocks(const BlockMeasurement& m, int64_t budget) {
  const size_t n = m.blocks.size();
  CheckpointChoice choice;
  choice.budget = budget;
  choice.measurement = m;
  choice.smallest_peak = predicted_peak(m, std::vector<bool>(n, true));
  choice.plain_peak = predicted_peak(m, std::vector<bool>(n, false));
  for (const auto& block : m.blocks) choice.all_extra_seconds += block.recompute_seconds;
  const std::vector<int64_t> limit = prefix_limits(m, budget);
  if (limit[0] < 0) {  // the windows before any block already exceed the budget
    choice.predicted_peak = choice.smallest_peak;
    for (const auto& block : m.blocks) choice.blocks.push_back(block.name);
    choice.extra_seconds = choice.all_extra_seconds;
    return choice;
  }
  // Byte counts in units of `unit`: weights rounded up, limits down, so a set within the rounded
  // limits is within the exact ones.
  int64_t total = 0;
  for (const auto& block : m.blocks) total += std::max<int64_t>(0, block.kept_bytes);
  const int64_t unit = std::max<int64_t>(1, (total + kUnits - 1) / kUnits);
  std::vector<int64_t> weight(n);
  for (size_t i = 0; i < n; ++i)
    weight[i] = (std::max<int64_t>(0, m.blocks[i].kept_bytes) + unit - 1) / unit;
  const int64_t states = total / unit + static_cast<int64_t>(n) + 1;
  auto cap = [&](size_t k) { return std::min(states - 1, limit[k] / unit); };

  std::vector<Kept> best(static_cast<size_t>(states));
  best[0] = {0, 0};
  std::vector<std::vector<char>> kept(n, std::vector<char>(static_cast<size_t>(states), 0));
  for (size_t i = 0; i < n; ++i) {
    std::vector<Kept> next(static_cast<size_t>(states));
    for (int64_t w = 0; w <= cap(i); ++w) {
      const Kept& from = best[static_cast<size_t>(w)];
      if (!from.reached()) continue;
      // Recompute block i: the bytes stay. Keep it: they grow by its weight. A state keeps the
      // first of equal sets to reach it.
      if (from.better_than(next[static_cast<size_t>(w)])) {
        next[static_cast<size_t>(w)] = from;
        kept[i][static_cast<size_t>(w)] = 0;
      }
      const int64_t to = w + weight[i];
      const Kept keep{from.seconds + m.blocks[i].recompute_seconds, from.count + 1};
      if (to < states && keep.better_than(next[static_cast<size_t>(to)])) {
        next[static_cast<size_t>(to)] = keep;
        kept[i][static_cast<size_t>(to)] = 1;
      }
    }
    best = std::move(next);
  }
  int64_t end = -1;
  for (int64_t w = 0; w <= cap(n); ++w) {
    if (best[static_cast<size_t>(w)].better_than(end < 0 ? Kept{} : best[static_cast<size_t>(end)]))
      end = w;
  }
  // At least the empty set of kept blocks is reachable when limit[0] >= 0 (every limit is).
  std::vector<bool> recomputed(n, true);
  for (size_t i = n; i-- > 0;) {
    if (kept[i][static_cast<size_t>(end)]) {
      recomputed[i] = false;
      end -= weight[i];
    }
  }
  choice.fits = true;
  for (size_t i = 0; i < n; ++i) {
    if (!recomputed[i]) continue;
    choice.blocks.push_back(m.blocks[i].name);
    choice.extra_seconds += m.blocks[i].recompute_seconds;
  }
  choice.predicted_peak = predicted_peak(m, recomputed);
  return choice;
}

int64_t cheaper_budget(const BlockMeasurement& m, const CheckpointChoice& chosen) {
  if (!chosen.fits || chosen.blocks.empty()) return 0;
  // Less added time, then fewer blocks: never worse as the budget grows, so the first budget that
  // gives it is found by halving the span between the chosen one and the plain step's peak.
  const auto cheaper = [&](int64_t budget) {
    const CheckpointChoice c = choose_blocks(m, budget);
    return c.fits && std::pair(c.extra_seconds, c.blocks.size()) <
                         std::pair(chosen.extra_seconds, chosen.blocks.size());
  };
  int64_t low = chosen.budget, high = std::max(chosen.plain_peak, chosen.budget + 1);
  while (!cheaper(high)) {  // rounding aside, the plain step fits its own peak
    if (high > std::numeric_limits<int64_t>::max() / 4) return 0;
    high += high - low;
  }
  while (high - low > 1) {
    const int64_t mid = low + (high - low) / 2;
    (cheaper(mid) ? high : low) = mid;
  }
  return high;
}

}  // namespace training
