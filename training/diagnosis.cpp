#include "training/diagnosis.h"

#include <spdlog/fmt/fmt.h>

#include "training/config.h"

namespace training {

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
