#include "training/step/amp.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace training {

const char* precision_name(Precision precision) {
  static const char* const names[] = {"fp32", "bf16", "fp16"};
  return names[static_cast<int>(precision)];
}

AutocastGuard::AutocastGuard(c10::DeviceType device_type, Precision precision)
    : device_type_(device_type), active_(precision != Precision::FP32) {
  if (!active_) return;
  previous_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_,
                                   precision == Precision::BF16 ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Leaving the outermost scope drops the cached casts of the weights, as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

GradScaler::GradScaler(bool enabled, torch::Device device, GradScalerOptions options)
    : enabled_(enabled), options_(options) {
  const auto on_device = torch::TensorOptions().device(device);
  scale_ = torch::full({1}, options_.init_scale(), on_device.dtype(torch::kFloat32));
  growth_tracker_ = torch::zeros({1}, on_device.dtype(torch::kInt32));
  found_inf_ = torch::zeros({1}, on_device.dtype(torch::kFloat32));
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_.to(loss.dtype()) : loss;
}

void GradScaler::unscale(torch::optim::Optimizer& optimizer) {
  if (!enabled_ || unscaled_) return;
  std::vector<torch::Tensor> grads;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) grads.push_back(p.mutable_grad());
    }
  }
  const auto inverse = scale_.to(torch::kFloat64).reciprocal().to(torch::kFloat32);
  torch::NoGradGuard no_grad;
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inverse);
  unscaled_ = true;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (enabled_) {
    unscale(optimizer);
    if (found_inf_.item<float>() != 0.0f) return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor(),
                         options_.backoff_factor(), options_.growth_interval());
  found_inf_.zero_();
  unscaled_ = false;
}

void GradScaler::load_state(const torch::Tensor& scale, const torch::Tensor& growth_tracker) {
  scale_.copy_(scale);
  growth_tracker_.copy_(growth_tracker);
}

}  // namespace training
