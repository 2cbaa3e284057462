#include "training/step/step.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "training/config/config.h"
#include "training/parts/components.h"

namespace {

// ResNet-18 (ImageNet stem) with its BatchNorm on running statistics (eval mode): no statistic
// of the batch enters, so one batch and its micro-batches have the same gradient.
training::StepParts comparable_parts(bool scaler) {
  const auto config = training::parse_config(
      "model: {arch: resnet18, stem: imagenet}\n"
      "training: {device: cpu, seed: 5}\n"
      "optimizer: {lr: 0.1, weight_decay: 5.0e-4}\n",
      "step_test");
  torch::manual_seed(5);
  auto parts = training::build_step_parts(config, torch::kCPU);
  parts.model->eval();
  parts.scaler = training::GradScaler(scaler, torch::kCPU);
  return parts;
}

struct Batch {
  torch::Tensor images, labels;
};

Batch batch_of(int64_t size) {
  torch::manual_seed(11);
  return {torch::randn({size, 3, 32, 32}), torch::randint(0, 10, {size})};
}

// Trains one optimizer step on `batch` as `micro_batches` equal micro-batches.
void step_in(training::StepParts& parts, const Batch& batch, int64_t micro_batches) {
  const auto images = batch.images.chunk(micro_batches);
  const auto labels = batch.labels.chunk(micro_batches);
  const auto options = training::StepOptions().accumulate_steps(micro_batches);
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    const auto result = training::train_step(parts, images[micro], labels[micro], options, micro);
    EXPECT_EQ(result.last_micro_batch, micro == micro_batches - 1);
  }
}

// The largest difference between the two models' parameters, relative to the largest value.
double largest_difference(training::StepParts& a, training::StepParts& b) {
  double largest = 0;
  const auto pa = a.model->parameters(), pb = b.model->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const double scale = std::max(pa[i].abs().max().item<double>(), 1e-3);
    largest = std::max(largest, (pa[i] - pb[i]).abs().max().item<double>() / scale);
  }
  return largest;
}

double largest_gradient_difference(training::StepParts& a, training::StepParts& b) {
  double largest = 0;
  const auto pa = a.model->parameters(), pb = b.model->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const double scale = std::max(pa[i].grad().abs().max().item<double>(), 1e-6);
    largest = std::max(largest, (pa[i].grad() - pb[i].grad()).abs().max().item<double>() / scale);
  }
  return largest;
}

TEST(Accumulation, MicroBatchesGiveTheGradientAndStepOfTheWholeBatch) {
  const auto batch = batch_of(16);
  auto whole = comparable_parts(false), micro = comparable_parts(false);
  ASSERT_EQ(largest_difference(whole, micro), 0.0);
  step_in(whole, batch, 1);
  step_in(micro, batch, 4);
  // The gradient is the mean over the effective batch (each micro-batch's loss / 4), not the sum.
  EXPECT_LT(largest_gradient_difference(whole, micro), 1e-4);
  EXPECT_LT(largest_difference(whole, micro), 1e-5);
  // Two steps on: the momentum agrees too.
  step_in(whole, batch, 1);
  step_in(micro, batch, 4);
  EXPECT_LT(largest_difference(whole, micro), 1e-5);
  // And the steps moved the weights, so equality is not trivial.
  auto untouched = comparable_parts(false);
  EXPECT_GT(largest_difference(whole, untouched), 1e-3);
}

// The GradScaler (fp16's; here on float32 arithmetic, where scaling by 2^16 is exact) unscales and
// checks once per optimizer step: a group's gradients come out as the unscaled mean, and the
// scaler's growth tracker counts one clean step, not one per micro-batch.
TEST(Accumulation, TheScalerUnscalesAndUpdatesOncePerOptimizerStep) {
  const auto batch = batch_of(8);
  auto plain = comparable_parts(false), scaled = comparable_parts(true);
  step_in(plain, batch, 1);
  step_in(scaled, batch, 2);
  EXPECT_LT(largest_gradient_difference(plain, scaled), 1e-4);
  EXPECT_LT(largest_difference(plain, scaled), 1e-5);
  EXPECT_EQ(scaled.scaler.growth_tracker_state().item<int64_t>(), 1);
  EXPECT_DOUBLE_EQ(scaled.scaler.current_scale(), 65536.0);
}

// An overflow in any micro-batch skips the whole group's step and halves the scale once.
TEST(Accumulation, AnOverflowInOneMicroBatchSkipsTheWholeGroup) {
  auto batch = batch_of(8);
  batch.images.slice(0, 4, 8).fill_(std::numeric_limits<float>::infinity());
  auto parts = comparable_parts(true), untouched = comparable_parts(true);
  const auto images = batch.images.chunk(2), labels = batch.labels.chunk(2);
  const auto options = training::StepOptions().accumulate_steps(2);
  EXPECT_TRUE(training::train_step(parts, images[0], labels[0], options, 0).stepped);
  const auto last = training::train_step(parts, images[1], labels[1], options, 1);
  EXPECT_TRUE(last.last_micro_batch);
  EXPECT_FALSE(last.stepped);
  EXPECT_EQ(largest_difference(parts, untouched), 0.0);  // the first micro-batch's share too
  EXPECT_DOUBLE_EQ(parts.scaler.current_scale(), 32768.0);
}

}  // namespace
