#include "training/step/optim.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

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
  EXPECT_DOUBLE_EQ(static_cast<const torch::optim::SGDOptions&>(decayed.options()).weight_decay(),
                   1e-3);
  EXPECT_DOUBLE_EQ(static_cast<const torch::optim::SGDOptions&>(plain.options()).weight_decay(),
                   0.0);
  EXPECT_EQ(decayed.params().size() + plain.params().size(), model->parameters().size());
}

TEST(Sgd, DecayingEverythingUsesOneGroup) {
  models::ResNet model(models::ResNetOptions(18).num_classes(10));
  auto optimizer =
      training::make_sgd(*model, training::OptimizerOptions().decay_norm_and_bias(true));
  EXPECT_EQ(optimizer->param_groups().size(), 1u);
}

TEST(Sgd, SetLearningRateReachesEveryGroup) {
  models::ResNet model(models::ResNetOptions(18).num_classes(10));
  auto optimizer = training::make_sgd(*model, training::OptimizerOptions());
  training::set_learning_rate(*optimizer, 0.0123);
  for (auto& group : optimizer->param_groups()) EXPECT_DOUBLE_EQ(group.options().get_lr(), 0.0123);
}

}  // namespace

namespace {

// Both optimizers from the same start, stepped on the same gradients.
TEST(FusedSgd, MatchesThePlainSgdStepForStep) {
  for (bool nesterov : {true, false}) {
    torch::manual_seed(4);
    models::ResNet a(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
    torch::manual_seed(4);
    models::ResNet b(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
    const auto options =
        training::OptimizerOptions().lr(0.05).nesterov(nesterov).weight_decay(1e-3);
    auto plain = training::make_sgd(*a, training::OptimizerOptions(options).fused(false));
    auto fused = training::make_sgd(*b, training::OptimizerOptions(options).fused(true));
    EXPECT_EQ(dynamic_cast<training::FusedSGD*>(plain.get()), nullptr);
    EXPECT_NE(dynamic_cast<training::FusedSGD*>(fused.get()), nullptr);
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(100 + step);
      const auto images = torch::randn({8, 3, 32, 32});
      const auto labels = torch::randint(0, 10, {8}, torch::kInt64);
      for (auto [model, optimizer] : {std::pair{a, plain.get()}, std::pair{b, fused.get()}}) {
        optimizer->zero_grad();
        torch::nn::functional::cross_entropy(model->forward(images), labels).backward();
        optimizer->step();
      }
    }
    auto pa = a->named_parameters(), pb = b->named_parameters();
    for (const auto& p : pa) {
      EXPECT_TRUE(torch::allclose(p.value(), pb[p.key()], 1e-5, 1e-6))
          << p.key() << " nesterov " << nesterov;
    }
  }
}

// The rate read from a tensor (what a graph-captured step uses) follows set_learning_rate
// exactly as the double does.
TEST(FusedSgd, TheDeviceLearningRateFollowsTheSchedule) {
  torch::manual_seed(5);
  models::ResNet a(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
  torch::manual_seed(5);
  models::ResNet b(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
  const auto options = training::OptimizerOptions().lr(0.05).weight_decay(1e-3);
  auto by_double = training::make_sgd(*a, options);
  auto by_tensor = training::make_sgd(*b, options);
  auto* fused = dynamic_cast<training::FusedSGD*>(by_tensor.get());
  ASSERT_NE(fused, nullptr);
  EXPECT_FALSE(fused->device_lr().defined());
  fused->use_device_lr(torch::kCPU);
  ASSERT_TRUE(fused->device_lr().defined());
  EXPECT_FLOAT_EQ(fused->device_lr().item<float>(), 0.05f);
  const double rates[] = {0.05, 0.2, 0.01};
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(200 + step);
    const auto images = torch::randn({8, 3, 32, 32});
    const auto labels = torch::randint(0, 10, {8}, torch::kInt64);
    for (auto [model, optimizer] : {std::pair{a, by_double.get()}, std::pair{b, by_tensor.get()}}) {
      training::set_learning_rate(*optimizer, rates[step]);
      optimizer->zero_grad();
      torch::nn::functional::cross_entropy(model->forward(images), labels).backward();
      optimizer->step();
    }
    EXPECT_FLOAT_EQ(fused->device_lr().item<float>(), static_cast<float>(rates[step]));
  }
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& p : pa) {
    EXPECT_TRUE(torch::allclose(p.value(), pb[p.key()], 1e-5, 1e-6)) << p.key();
  }
}

TEST(FusedSgd, CheckpointsAreInterchangeableWithThePlainSgd) {
  torch::manual_seed(1);
  models::ResNet model(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
  auto fused = training::make_sgd(*model, training::OptimizerOptions().weight_decay(0).fused(true));
  torch::nn::functional::cross_entropy(model->forward(torch::randn({4, 3, 32, 32})),
                                       torch::randint(0, 10, {4}, torch::kInt64))
      .backward();
  fused->step();
  torch::serialize::OutputArchive out;
  fused->save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  auto plain =
      training::make_sgd(*model, training::OptimizerOptions().weight_decay(0).fused(false));
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  plain->load(in);
  const auto params = model->parameters();
  const auto& p = params.front();
  ASSERT_EQ(fused->state().size(), model->parameters().size());
  ASSERT_EQ(plain->state().size(), model->parameters().size());
  const auto& a =
      static_cast<torch::optim::SGDParamState&>(*fused->state().at(p.unsafeGetTensorImpl()));
  const auto& b =
      static_cast<torch::optim::SGDParamState&>(*plain->state().at(p.unsafeGetTensorImpl()));
  EXPECT_TRUE(a.momentum_buffer().equal(b.momentum_buffer()));
  EXPECT_TRUE(a.momentum_buffer().equal(p.grad()));  // first step: the buffer is the gradient
}

}  // namespace
