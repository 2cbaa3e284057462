#include "training/optim.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/resnet.h"

namespace {

namespace F = torch::nn::functional;

TEST(Sgd, OneStepLowersTheLossOnAFixedBatch) {
  torch::manual_seed(0);
  models::ResNet model(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
  auto optimizer = training::make_sgd(*model, training::OptimizerOptions().lr(0.01));
  auto images = torch::randn({16, 3, 32, 32});
  auto labels = torch::randint(0, 10, {16}, torch::kInt64);
  auto loss_now = [&] { return F::cross_entropy(model->forward(images), labels); };

  auto before = loss_now();
  optimizer->zero_grad();
  before.backward();
  optimizer->step();
  EXPECT_LT(loss_now().item<double>(), before.item<double>());
}

TEST(Sgd, NormAndBiasParametersAreNotDecayedByDefault) {
  models::ResNet model(models::ResNetOptions(18).num_classes(10));
  auto optimizer = training::make_sgd(*model, training::OptimizerOptions().weight_decay(1e-3));
  ASSERT_EQ(optimizer->param_groups().size(), 2u);
  const auto& decayed = optimizer->param_groups()[0];
  const auto& plain = optimizer->param_groups()[1];
  for (const auto& p : decayed.params()) EXPECT_GT(p.dim(), 1);
  for (const auto& p : plain.params()) EXPECT_EQ(p.dim(), 1);
  EXPECT_DOUBLE_EQ(static_cast<const torch::optim::SGDOptions&>(decayed.options()).weight_decay(), 1e-3);
  EXPECT_DOUBLE_EQ(static_cast<const torch::optim::SGDOptions&>(plain.options()).weight_decay(), 0.0);
  EXPECT_EQ(decayed.params().size() + plain.params().size(), model->parameters().size());
}

TEST(Sgd, DecayingEverythingUsesOneGroup) {
  models::ResNet model(models::ResNetOptions(18).num_classes(10));
  auto optimizer = training::make_sgd(*model, training::OptimizerOptions().decay_norm_and_bias(true));
  EXPECT_EQ(optimizer->param_groups().size(), 1u);
}

TEST(Sgd, SetLearningRateReachesEveryGroup) {
  models::ResNet model(models::ResNetOptions(18).num_classes(10));
  auto optimizer = training::make_sgd(*model, training::OptimizerOptions());
  training::set_learning_rate(*optimizer, 0.0123);
  for (auto& group : optimizer->param_groups()) EXPECT_DOUBLE_EQ(group.options().get_lr(), 0.0123);
}

}  // namespace
