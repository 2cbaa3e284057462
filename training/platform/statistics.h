// Small summaries of measured samples, shared by the benchmarks and the sweep trials.
#pragma once

#include <algorithm>
#include <vector>

namespace training {

// The median of `values` (the mean of the middle two for an even count); 0 for none. Step and
// kernel times have a long upper tail (page faults, other processes), which the median ignores.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace training
