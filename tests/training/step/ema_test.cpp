#include "training/step/ema.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

models::ResNet small_model(uint64_t seed) {
  torch::manual_seed(seed);
  return models::ResNet(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
}

// The average starts as the model's weights and moves by (1 - decay) of the gap each update;
// BatchNorm's integer step count is copied, not averaged.
TEST(WeightAverage, MovesTowardTheModelByOneMinusDecay) {
  auto model = small_model(1);
  training::WeightAverage ema(model, small_model(2), 0.9);
  const auto p = model->parameters().front();
  EXPECT_TRUE(ema.average()->parameters().front().equal(p));  // starts as a copy
  const auto before = p.detach().clone();
  {
    torch::NoGradGuard no_grad;
    p.add_(1.0);
    for (auto& b : model->named_buffers()) {
      if (b.key().find("num_batches_tracked") != std::string::npos) b.value().fill_(7);
    }
  }
  ema.update();
  // 0.9 * before + 0.1 * (before + 1) = before + 0.1
  EXPECT_TRUE(torch::allclose(ema.average()->parameters().front(), before + 0.1, 1e-6, 1e-6));
  for (auto& b : ema.average()->named_buffers()) {
    if (b.key().find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(b.value().item<int64_t>(), 7);
    }
  }
  ema.update();  // 0.9 * (before + 0.1) + 0.1 * (before + 1) = before + 0.19
  EXPECT_TRUE(torch::allclose(ema.average()->parameters().front(), before + 0.19, 1e-6, 1e-6));
  ema.reset();
  EXPECT_TRUE(ema.average()->parameters().front().equal(p));
}

}  // namespace
