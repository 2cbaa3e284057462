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
  // A sentence per finding: what was measured, against which threshold, and what to change.
  std::vector<std::string> findings;
};

// On the CPU, where the rest of the run at the measured rate would take over an hour, a line naming
// the quick alternatives (configs/quick_cpu.yaml, training.max_steps, data.test_limit). An
// evaluated image counts a third of a trained one (one forward pass against forward and backward),
// two thirds with eval_flip.
std::optional<std::string> long_cpu_run_warning(int64_t steps_left, int64_t batch_size,
                                                double images_per_second, int64_t evaluations = 0,
                                                int64_t test_images = 0, bool eval_flip = false);

// `prefetch`: data.prefetch as resolved for the device (part of the advice).
Diagnosis diagnose(double data_wait_fraction, std::optional<double> utilization_mean, bool cuda,
                   const MonitorConfig& monitor, int64_t prefetch);

}  // namespace training
