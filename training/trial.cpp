#include "training/trial.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "training/device.h"
#include "training/errors.h"
#include "training/optim.h"
#include "training/statistics.h"
#include "training/step.h"

namespace training {

nlohmann::ordered_json to_json(const TrialResult& r) {
  return {{"status", r.status},
          {"message", r.message},
          {"peak_allocated_bytes", r.peak_allocated_bytes},
          {"peak_reserved_bytes", r.peak_reserved_bytes},
          {"steady_peak_allocated_bytes", r.steady_peak_allocated_bytes},
          {"steady_peak_reserved_bytes", r.steady_peak_reserved_bytes},
          {"median_step_seconds", r.median_step_seconds},
          {"images_per_second", r.images_per_second},
          {"steps", r.steps}};
}

TrialResult trial_from_json(const nlohmann::json& j) {
  TrialResult r;
  r.status = j.at("status").get<std::string>();
  r.message = j.at("message").get<std::string>();
  r.peak_allocated_bytes = j.at("peak_allocated_bytes").get<int64_t>();
  r.peak_reserved_bytes = j.at("peak_reserved_bytes").get<int64_t>();
  r.steady_peak_allocated_bytes = j.at("steady_peak_allocated_bytes").get<int64_t>();
  r.steady_peak_reserved_bytes = j.at("steady_peak_reserved_bytes").get<int64_t>();
  r.median_step_seconds = j.at("median_step_seconds").get<double>();
  r.images_per_second = j.at("images_per_second").get<double>();
  r.steps = j.at("steps").get<int64_t>();
  return r;
}

TrialResult run_trial(const Config& config, int64_t warmup_steps, int64_t measure_steps) {
  const torch::Device device = resolve_device(config.training.device);
  make_current(device);
  set_memory_limit(device, config.memory.limit);
  set_cuda_math(config.training.cudnn_benchmark, config.training.allow_tf32);
  TrialResult result;
  std::vector<double> step_seconds;
  MemoryStats warmup_peaks;  // over the warm-up steps (the first step among them)
  try {
    auto model = build_model(config, device);
    auto optimizer = make_sgd(*model, config.optimizer);
    GradScaler scaler(config.training.precision == Precision::FP16, device);
    const int64_t batch = config.training.batch_size;
    auto images = torch::randn({batch, 3, 32, 32}, torch::TensorOptions().device(device))
                      .contiguous(config.training.memory_format);
    auto labels = torch::randint(0, config.model.num_classes(), {batch},
                                 torch::TensorOptions(torch::kInt64).device(device));
    model->train();
    synchronize(device);
    reset_peak_memory(device);
    for (int64_t step = 0; step < warmup_steps + measure_steps; ++step) {
      if (step == warmup_steps && warmup_steps > 0) {
        warmup_peaks = memory_stats(device);
        reset_peak_memory(device);  // the measured steps' own peak from here
      }
      const auto start = std::chrono::steady_clock::now();
      train_step(model, *optimizer, scaler, config.training.precision,
                 config.training.label_smoothing, images, labels);
      synchronize(device);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (step >= warmup_steps) step_seconds.push_back(seconds);
      ++result.steps;
    }
    result.status = "ok";
  } catch (const std::exception& e) {
    result.status = is_out_of_memory(e) ? "oom" : "error";
    result.message = error_line(e);
  }
  const MemoryStats memory = memory_stats(device);
  result.steady_peak_allocated_bytes = memory.peak_allocated;
  result.steady_peak_reserved_bytes = memory.peak_reserved;
  result.peak_allocated_bytes = std::max(memory.peak_allocated, warmup_peaks.peak_allocated);
  result.peak_reserved_bytes = std::max(memory.peak_reserved, warmup_peaks.peak_reserved);
  if (!step_seconds.empty()) {
    result.median_step_seconds = median(step_seconds);
    result.images_per_second = config.training.batch_size / result.median_step_seconds;
  }
  return result;
}

}  // namespace training
