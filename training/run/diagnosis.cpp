#include "training/run/diagnosis.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "training/config/config.h"
#include "training/platform/duration.h"
#include "training/platform/statistics.h"

namespace training {

std::optional<std::string> long_cpu_run_warning(int64_t steps_left, int64_t batch_size,
                                                double images_per_second, int64_t evaluations,
                                                int64_t test_images, bool eval_flip) {
  // An evaluated image is one forward pass (two with eval_flip), a trained one about three.
  const double evaluated = static_cast<double>(evaluations * test_images) * (eval_flip ? 2 : 1) / 3;
  const double seconds = (static_cast<double>(steps_left * batch_size) + evaluated) /
                         std::max(images_per_second, 1e-9);
  if (seconds <= 3600) return std::nullopt;
  const std::string work =
      evaluations > 0 && test_images > 0
          ? fmt::format(
                "{} steps take about {} on this CPU with their {} evaluation(s) of {} "
                "test images (an evaluated image counted as {} of a trained one)",
                steps_left, format_duration(seconds), evaluations, test_images,
                eval_flip ? "two thirds" : "a third")
          : fmt::format("{} steps take about {} on this CPU (training alone, evaluation extra)",
                        steps_left, format_duration(seconds));
  return fmt::format(
      "cpu: at {} img/s the remaining {}; for a first result in minutes try --config "
      "configs/quick_cpu.yaml, run this config on a GPU (--device cuda), or bound this run with "
      "--set training.max_steps=N{}. Continuing.",
      rate_text(images_per_second), work, evaluations > 0 ? " --set data.test_limit=N" : "");
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
