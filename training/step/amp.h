// Mixed precision: an RAII autocast scope for CPU and CUDA, and a GradScaler written in C++ on
// the same ATen kernels as PyTorch's (torch.amp.GradScaler), with its defaults.
#pragma once

#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

namespace training {

enum class Precision { FP32, BF16, FP16 };

const char* precision_name(Precision precision);

// Enables autocast to the precision's dtype on `device_type` for the guard's lifetime and
// restores the previous state after (nesting works). FP32 leaves autocast untouched.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, Precision precision);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool active_;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

struct GradScalerOptions {
  TORCH_ARG(double, init_scale) = 65536.0;  // 2^16
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;  // clean steps before the scale grows
};

// Loss scaling for fp16: scale(loss).backward(); step(optimizer); update(). A step whose
// gradients hold inf/NaN is skipped and the scale backs off; after growth_interval clean steps
// in a row the scale grows. Disabled (precision other than fp16) it passes everything through.
class GradScaler {
 public:
  GradScaler(bool enabled, torch::Device device, GradScalerOptions options = {});

  torch::Tensor scale(const torch::Tensor& loss) const;
  // Divides the gradients by the scale and records whether any is inf/NaN (once per step).
  void unscale(torch::optim::Optimizer& optimizer);
  // Runs optimizer.step() unless the gradients held inf/NaN; returns whether it stepped.
  // Reads one flag back from the device (as PyTorch's GradScaler does).
  bool step(torch::optim::Optimizer& optimizer);
  // Adjusts the scale from this step's inf/NaN flag.
  void update();

  bool enabled() const { return enabled_; }
  // Device memory its state holds (the scale, the clean-step count, the inf/NaN flag).
  int64_t state_bytes() const {
    return static_cast<int64_t>(scale_.nbytes() + growth_tracker_.nbytes() + found_inf_.nbytes());
  }
  double current_scale() const { return enabled_ ? scale_.item<double>() : 1.0; }
  // State for checkpoints: the scale (float32 [1]) and the clean-step count (int32 [1]).
  torch::Tensor scale_state() const { return scale_; }
  torch::Tensor growth_tracker_state() const { return growth_tracker_; }
  void load_state(const torch::Tensor& scale, const torch::Tensor& growth_tracker);

 private:
  bool enabled_;
  GradScalerOptions options_;
  torch::Tensor scale_;           // float32 [1] on the device
  torch::Tensor growth_tracker_;  // int32 [1] on the device
  torch::Tensor found_inf_;       // float32 [1] on the device
  bool unscaled_ = false;
};

}  // namespace training
