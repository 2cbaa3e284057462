// SGD with momentum (optionally Nesterov) and weight decay, optionally not applied to
// BatchNorm parameters and biases (the usual practice for ResNets).
#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>

#include <memory>

namespace training {

struct OptimizerOptions {
  TORCH_ARG(double, lr) = 0.1;
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(bool, nesterov) = true;
  TORCH_ARG(double, weight_decay) = 5e-4;
  // Also decay 1-d parameters (BatchNorm weights/biases, biases). Off by default.
  TORCH_ARG(bool, decay_norm_and_bias) = false;
  // One fused kernel per parameter group (at::_fused_sgd_) instead of three ops per parameter.
  TORCH_ARG(bool, fused) = true;
};

// torch::optim::SGD with its update done by ATen's fused SGD kernel (what PyTorch's
// SGD(fused=True) runs). Same state layout (SGDParamState momentum buffers), so checkpoints are
// interchangeable with the plain SGD, and the same numbers up to float rounding.
class FusedSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;

  // From now on the kernel reads the learning rate from a float32 tensor on `device`, which
  // set_learning_rate fills: what a captured step needs (a double would be frozen into the graph
  // at capture). Every parameter group then runs at that one rate.
  void use_device_lr(const torch::Device& device);
  const torch::Tensor& device_lr() const { return lr_; }
  void fill_device_lr(double lr);  // no-op without use_device_lr

 private:
  torch::Tensor lr_;  // undefined unless use_device_lr
};

// Parameter group 0 gets weight decay; group 1 (when decay_norm_and_bias is off) holds the 1-d
// parameters and gets none. FusedSGD when options.fused.
std::unique_ptr<torch::optim::SGD> make_sgd(torch::nn::Module& model,
                                            const OptimizerOptions& options);

// Sets every group's rate, and a FusedSGD's device rate when it has one.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace training
