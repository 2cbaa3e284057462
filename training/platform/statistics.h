// Small summaries of measured samples, shared by the benchmarks and the sweep trials.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
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

// A rate (images/s) as the tables write it: whole from 10 on, two significant digits below, so
// that a slow measurement is never shown as 0 ("0.43", "3.4", "1534").
inline std::string rate_text(double per_second) {
  return per_second >= 9.95 ? fmt::format("{:.0f}", per_second) : fmt::format("{:.2g}", per_second);
}

}  // namespace training
