#include "training/step/optim.h"

#include <ATen/ops/_fused_sgd.h>
#include <torch/torch.h>

namespace training {

std::unique_ptr<torch::optim::SGD> make_sgd(torch::nn::Module& model,
                                            const OptimizerOptions& options) {
  auto sgd_options = [&](double weight_decay) {
    return torch::optim::SGDOptions(options.lr())
        .momentum(options.momentum())
        .nesterov(options.nesterov())
        .weight_decay(weight_decay);
  };
  std::vector<torch::Tensor> decayed, not_decayed;
  for (auto& p : model.parameters()) {
    (options.decay_norm_and_bias() || p.dim() > 1 ? decayed : not_decayed).push_back(p);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      decayed, std::make_unique<torch::optim::SGDOptions>(sgd_options(options.weight_decay())));
  if (!not_decayed.empty()) {
    groups.emplace_back(not_decayed, std::make_unique<torch::optim::SGDOptions>(sgd_options(0.0)));
  }
  if (options.fused()) {
    return std::make_unique<FusedSGD>(std::move(groups), sgd_options(options.weight_decay()));
  }
  return std::make_unique<torch::optim::SGD>(std::move(groups),
                                             sgd_options(options.weight_decay()));
}

torch::Tensor FusedSGD::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    // Parameters whose momentum buffer exists, and those on their first step (buffer = grad).
    std::vector<torch::Tensor> params[2], grads[2], buffers[2];
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::Tensor buffer;
      bool first = false;
      if (options.momentum() != 0) {
        auto found = state_.find(p.unsafeGetTensorImpl());
        if (found == state_.end()) {
          auto state = std::make_unique<torch::optim::SGDParamState>();
          state->momentum_buffer(torch::empty_like(p, at::MemoryFormat::Preserve));
          buffer = state->momentum_buffer();
          state_[p.unsafeGetTensorImpl()] = std::move(state);
          first = true;
        } else {
          buffer = static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer();
        }
      }
      params[first].push_back(p);
      grads[first].push_back(p.grad());
      if (buffer.defined()) buffers[first].push_back(buffer);
    }
    for (int first = 0; first < 2; ++first) {
      if (params[first].empty()) continue;
      const auto fused_sgd = [&](const auto& lr) {  // the device tensor, or the group's value
        at::_fused_sgd_(params[first], grads[first], buffers[first], options.weight_decay(),
                        options.momentum(), lr, options.dampening(), options.nesterov(),
                        /*maximize=*/false, /*is_first_step=*/first == 1);
      };
      lr_.defined() ? fused_sgd(lr_) : fused_sgd(options.lr());
    }
  }
  return loss;
}

void FusedSGD::use_device_lr(const torch::Device& device) {
  const double lr = param_groups().at(0).options().get_lr();
  lr_ = torch::full({}, lr, torch::TensorOptions(torch::kFloat32).device(device));
  for (auto& group : param_groups()) group.options().set_lr(lr);
}

void FusedSGD::fill_device_lr(double lr) {
  if (!lr_.defined()) return;
  torch::NoGradGuard no_grad;
  lr_.fill_(lr);  // queued on the device like the steps around it: no host synchronisation
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
  if (auto* fused = dynamic_cast<FusedSGD*>(&optimizer)) fused->fill_device_lr(lr);
}

}  // namespace training
