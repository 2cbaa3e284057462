#include "training/step/amp.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/resnet.h"
#include "test_support.h"
#include "training/platform/device.h"
#include "training/step/optim.h"
#include "training/step/step.h"

namespace {

using training::GradScaler;
using training::Precision;

TEST(Autocast, GuardSetsTheDtypeAndRestoresTheState) {
  auto a = torch::randn({8, 8}), b = torch::randn({8, 8});
  {
    training::AutocastGuard bf16(c10::DeviceType::CPU, Precision::BF16);
    EXPECT_EQ(torch::mm(a, b).dtype(), torch::kBFloat16);
    {
      training::AutocastGuard fp16(c10::DeviceType::CPU, Precision::FP16);
      EXPECT_EQ(torch::mm(a, b).dtype(), torch::kHalf);
    }
    EXPECT_EQ(torch::mm(a, b).dtype(), torch::kBFloat16);  // the outer scope is back
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
  EXPECT_EQ(torch::mm(a, b).dtype(), torch::kFloat32);
  training::AutocastGuard fp32(c10::DeviceType::CPU, Precision::FP32);
  EXPECT_EQ(torch::mm(a, b).dtype(), torch::kFloat32);
}

// A one-parameter problem whose gradient we control.
struct Toy {
  torch::Tensor weight = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD optimizer{{weight}, torch::optim::SGDOptions(0.1)};
  torch::Tensor loss(float factor) { return (weight * factor).sum(); }
};

TEST(GradScaler, CleanStepUnscalesGradientsAndSteps) {
  Toy toy;
  GradScaler scaler(true, torch::kCPU);
  scaler.scale(toy.loss(2.0f)).backward();
  EXPECT_FLOAT_EQ(toy.weight.grad()[0].item<float>(), 2.0f * 65536);
  EXPECT_TRUE(scaler.step(toy.optimizer));
  EXPECT_FLOAT_EQ(toy.weight.grad()[0].item<float>(), 2.0f);  // unscaled before the step
  EXPECT_FLOAT_EQ(toy.weight[0].item<float>(), 1.0f - 0.1f * 2.0f);
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 65536.0);
}

TEST(GradScaler, InfGradientsSkipTheStepAndHalveTheScale) {
  Toy toy;
  GradScaler scaler(true, torch::kCPU);
  scaler.scale(toy.loss(std::numeric_limits<float>::infinity())).backward();
  EXPECT_FALSE(scaler.step(toy.optimizer));
  scaler.update();
  EXPECT_TRUE(toy.weight.equal(torch::ones({3})));  // untouched
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 32768.0);
  // NaN does the same.
  toy.optimizer.zero_grad();
  scaler.scale(toy.loss(std::numeric_limits<float>::quiet_NaN())).backward();
  EXPECT_FALSE(scaler.step(toy.optimizer));
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 16384.0);
}

TEST(GradScaler, ScaleGrowsAfterTheIntervalOfCleanSteps) {
  Toy toy;
  GradScaler scaler(true, torch::kCPU, training::GradScalerOptions().growth_interval(3));
  for (int step = 1; step <= 3; ++step) {
    toy.optimizer.zero_grad();
    scaler.scale(toy.loss(1.0f)).backward();
    EXPECT_TRUE(scaler.step(toy.optimizer));
    scaler.update();
    EXPECT_DOUBLE_EQ(scaler.current_scale(), step < 3 ? 65536.0 : 131072.0) << "step " << step;
  }
  // An overflow resets the count of clean steps.
  toy.optimizer.zero_grad();
  scaler.scale(toy.loss(std::numeric_limits<float>::infinity())).backward();
  scaler.step(toy.optimizer);
  scaler.update();
  EXPECT_EQ(scaler.growth_tracker_state().item<int>(), 0);
}

TEST(GradScaler, StateRoundTrips) {
  GradScaler a(true, torch::kCPU), b(true, torch::kCPU);
  a.load_state(torch::full({1}, 512.0f), torch::full({1}, 7, torch::kInt32));
  b.load_state(a.scale_state(), a.growth_tracker_state());
  EXPECT_DOUBLE_EQ(b.current_scale(), 512.0);
  EXPECT_EQ(b.growth_tracker_state().item<int>(), 7);
}

TEST(GradScaler, DisabledPassesThrough) {
  Toy toy;
  GradScaler scaler(false, torch::kCPU);
  auto loss = toy.loss(1.0f);
  EXPECT_TRUE(scaler.scale(loss).equal(loss));
  loss.backward();
  EXPECT_TRUE(scaler.step(toy.optimizer));
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 1.0);
}

// ResNet-18 with the SGD, and a GradScaler that is on for fp16.
training::StepParts small_parts(Precision precision) {
  torch::manual_seed(0);
  models::ResNet model(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
  auto optimizer = training::make_sgd(*model, training::OptimizerOptions().lr(0.01));
  return {model, std::move(optimizer), GradScaler(precision == Precision::FP16, torch::kCPU),
          nullptr};
}

// Small (4 images): where bf16 is emulated (AVX2 kernels) it is hundreds of times slower.
TEST(MixedPrecision, Bf16TrainingLowersTheLoss) {
  auto parts = small_parts(Precision::BF16);
  const auto bf16 = training::StepOptions().precision(Precision::BF16);
  auto images = torch::randn({4, 3, 32, 32});
  auto labels = torch::randint(0, 10, {4}, torch::kInt64);
  const auto first = training::train_step(parts, images, labels, bf16);
  EXPECT_EQ(first.logits.dtype(), torch::kBFloat16);
  training::StepResult last = first;
  for (int i = 0; i < 4; ++i) {
    last = training::train_step(parts, images, labels, bf16);
  }
  EXPECT_LT(last.loss.item<double>(), first.loss.item<double>());
}

TEST(MixedPrecision, Fp16StepWithTheScalerLowersTheLoss) {
  auto parts = small_parts(Precision::FP16);
  const auto fp16 = training::StepOptions().precision(Precision::FP16);
  auto images = torch::randn({4, 3, 32, 32});  // fp16 convolutions are slow on the CPU
  auto labels = torch::randint(0, 10, {4}, torch::kInt64);
  const auto first = training::train_step(parts, images, labels, fp16);
  // The first steps may overflow at the initial scale of 65536 and be skipped (as in PyTorch).
  training::StepResult last = first;
  int stepped = first.stepped ? 1 : 0;
  for (int i = 0; i < 11; ++i) {
    last = training::train_step(parts, images, labels, fp16);
    stepped += last.stepped ? 1 : 0;
  }
  EXPECT_GT(stepped, 3);
  EXPECT_LT(last.loss.item<double>(), first.loss.item<double>());
}

// Peak tracked bytes of one forward + backward at this precision.
int64_t step_peak(Precision precision) {
  auto model = models::ResNet(models::ResNetOptions(18).stem(models::Stem::Cifar).num_classes(10));
  auto images = torch::randn({48, 3, 32, 32});  // large enough for activations to dominate
  auto labels = torch::randint(0, 10, {48}, torch::kInt64);
  training::reset_peak_memory(torch::kCPU);
  const int64_t base = training::memory_stats(torch::kCPU).allocated;
  {
    training::AutocastGuard autocast(c10::DeviceType::CPU, precision);
    auto loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
    loss.backward();
  }
  return training::memory_stats(torch::kCPU).peak_allocated - base;
}

TEST(MixedPrecision, Bf16PeakMemoryIsBelowFp32OnTheSameBatch) {
  NATIVE_BF16_OR_SKIP();  // 48 images of the CIFAR stem: about 160 GFLOP of bf16
  training::TrackingCpuAllocator::instance();
  const int64_t fp32 = step_peak(Precision::FP32);
  const int64_t bf16 = step_peak(Precision::BF16);
  std::cout << "peak above the model: fp32 " << fp32 << " B, bf16 " << bf16 << " B\n";
  EXPECT_LT(bf16, fp32 * 0.85);
}

}  // namespace
