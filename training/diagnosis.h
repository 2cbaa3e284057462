// Where the time went, in words: the verdicts that the epoch log and the run report give from
// the measured data-wait share and GPU utilisation. One function, so the two always agree.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace training {

struct MonitorConfig;

struct Diagnosis {
  bool input_bound = false;  // the loop waited for data longer than the threshold
  bool gpu_idle = false;     // mean GPU utilisation below its threshold (CUDA only)
  // One sentence per finding (empty when neither): what was measured, against which threshold,
  // and what to change.
  std::vector<std::string> findings;
};

// `prefetch`: data.prefetch as resolved for the device (part of the advice).
Diagnosis diagnose(double data_wait_fraction, std::optional<double> utilization_mean, bool cuda,
                   const MonitorConfig& monitor, int64_t prefetch);

}  // namespace training
