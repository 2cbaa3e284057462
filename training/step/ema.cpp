#include "training/step/ema.h"

#include <c10/util/Exception.h>

namespace training {

namespace {

// Parameters then buffers, in registration order: the same order for two models of one
// architecture.
std::vector<torch::Tensor> state_of(models::ResNet& model) {
  std::vector<torch::Tensor> tensors = model->parameters();
  for (auto& buffer : model->buffers()) tensors.push_back(buffer);
  return tensors;
}

}  // namespace

WeightAverage::WeightAverage(models::ResNet model, models::ResNet average, double decay)
    : model_(std::move(model)), average_(std::move(average)), decay_(decay) {
  const auto from = state_of(model_), to = state_of(average_);
  TORCH_INTERNAL_ASSERT(from.size() == to.size(), "the average's architecture is the model's");
  for (size_t i = 0; i < from.size(); ++i) {
    const bool floating = at::isFloatingType(from[i].scalar_type());
    (floating ? model_floats_ : model_ints_).push_back(from[i]);
    (floating ? average_floats_ : average_ints_).push_back(to[i]);
  }
  average_->eval();
  reset();
}

void WeightAverage::update() {
  torch::NoGradGuard no_grad;
  torch::_foreach_lerp_(average_floats_, model_floats_, 1.0 - decay_);
  for (size_t i = 0; i < model_ints_.size(); ++i) average_ints_[i].copy_(model_ints_[i]);
}

void WeightAverage::reset() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model_floats_.size(); ++i) average_floats_[i].copy_(model_floats_[i]);
  for (size_t i = 0; i < model_ints_.size(); ++i) average_ints_[i].copy_(model_ints_[i]);
}

}  // namespace training
