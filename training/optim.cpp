#include "training/optim.h"

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
  groups.emplace_back(decayed, std::make_unique<torch::optim::SGDOptions>(
                                   sgd_options(options.weight_decay())));
  if (!not_decayed.empty()) {
    groups.emplace_back(not_decayed, std::make_unique<torch::optim::SGDOptions>(sgd_options(0.0)));
  }
  return std::make_unique<torch::optim::SGD>(std::move(groups), sgd_options(options.weight_decay()));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace training
