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

// On the CPU, after the first steady steps: when the rest of the run at the measured rate would
// take more than an hour, the one line that says so and names the quick alternatives
// (configs/quick_cpu.yaml, training.max_steps, data.test_limit); nullopt otherwise. The rest is
// `steps_left` steps of `batch_size` images and `evaluations` passes over `test_images` test
// images, an evaluated image counted as a third of a trained one (a forward pass against a
// forward and a backward pass), two thirds with eval_flip (two forward passes).
std::optional<std::string> long_cpu_run_warning(int64_t steps_left, int64_t batch_size,
                                                double images_per_second, int64_t evaluations = 0,
                                                int64_t test_images = 0, bool eval_flip = false);

// `prefetch`: data.prefetch as resolved for the device (part of the advice).
Diagnosis diagnose(double data_wait_fraction, std::optional<double> utilization_mean, bool cuda,
                   const MonitorConfig& monitor, int64_t prefetch);

}  // namespace training
