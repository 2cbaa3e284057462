#include "training/diagnosis.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "training/config.h"
#include "training/progress.h"

namespace training {

std::optional<std::string> long_cpu_run_warning(int64_t steps_left, int64_t batch_size,
                                                double images_per_second) {
  const double seconds =
      static_cast<double>(steps_left * batch_size) / std::max(images_per_second, 1e-9);
  if (seconds <= 3600) return std::nullopt;
  return fmt::format(
      "cpu: at {:.0f} img/s the remaining {} steps take about {} on this CPU (training alone, "
      "evaluation extra); for a first result in minutes try --config configs/quick_cpu.yaml, "
      "run this config on a GPU (--device cuda), or bound this run with --set "
      "training.max_steps=N. Continuing.",
      images_per_second, steps_left, format_duration(seconds));
}

Diagnosis diagnose(double data_wait_fraction, std::optional<double> utilization_mean, bool cuda,
                   const MonitorConfig& monitor, int64_t prefetch) {
  Diagnosis d;
  d.input_bound = data_wait_fraction > monitor.data_wait_threshold;
  d.gpu_idle = cuda && utilization_mean && *utilization_mean < monitor.utilization_threshold;
  if (d.input_bound) {
    d.findings.push_back(fmt::format(
        "input pipeline: the loop waited for data {:.0f}% of the epoch (threshold {:.0f}%); "
        "batches are prepared slower than steps run: try data.device_resident: true, a larger "
        "data.prefetch (now {}), or a larger training.batch_size",
        100 * data_wait_fraction, 100 * monitor.data_wait_threshold, prefetch));
  }
  if (d.gpu_idle) {
    d.findings.push_back(fmt::format(
        "GPU utilisation averaged {:.0f}% (threshold {:.0f}%): the GPU idles between kernels; {}",
        100 * *utilization_mean, 100 * monitor.utilization_threshold,
        d.input_bound ? "the input pipeline is the likely cause (see above)"
                      : "small kernels and per-step host overhead are the likely cause: try a "
                        "larger training.batch_size, training.precision: bf16, "
                        "training.memory_format: channels_last"));
  }
  return d;
}

}  // namespace training
