#include "training/step/recompute.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "training/platform/device.h"
#include "training/platform/memory.h"
#include "training/step/amp.h"

namespace {

using training::CheckpointGranularity;
using training::CheckpointingOptions;

models::ResNet seeded(int64_t depth, models::Stem stem) {
  torch::manual_seed(11);
  return models::ResNet(models::ResNetOptions(depth).stem(stem).num_classes(10));
}

struct Outcome {
  std::map<std::string, torch::Tensor> grads;
  std::map<std::string, torch::Tensor> buffers;
  int64_t peak = 0;  // tracked CPU bytes above the start, during forward + backward
};

Outcome forward_backward(const CheckpointingOptions& options, int64_t depth = 18,
                         models::Stem stem = models::Stem::ImageNet, int64_t batch = 8) {
  auto model = seeded(depth, stem);
  training::apply_checkpointing(*model, options);
  torch::manual_seed(5);
  auto images = torch::randn({batch, 3, 32, 32});
  auto labels = torch::randint(0, 10, {batch}, torch::kInt64);
  training::reset_peak_memory(torch::kCPU);
  const int64_t base = training::memory_stats(torch::kCPU).allocated;
  torch::nn::functional::cross_entropy(model->forward(images), labels).backward();
  Outcome outcome;
  outcome.peak = training::memory_stats(torch::kCPU).peak_allocated - base;
  for (const auto& p : model->named_parameters()) outcome.grads[p.key()] = p.value().grad().clone();
  for (const auto& b : model->named_buffers()) outcome.buffers[b.key()] = b.value().clone();
  return outcome;
}

void expect_same(const Outcome& plain, const Outcome& checkpointed) {
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (const auto& [name, grad] : plain.grads) {
    ASSERT_TRUE(checkpointed.grads.at(name).defined()) << name;
    EXPECT_TRUE(torch::allclose(grad, checkpointed.grads.at(name), 1e-5, 1e-5)) << name;
  }
  // BatchNorm running statistics saw each batch once, as without checkpointing.
  for (const auto& [name, buffer] : plain.buffers) {
    EXPECT_TRUE(torch::allclose(buffer.to(torch::kFloat64),
                                checkpointed.buffers.at(name).to(torch::kFloat64), 1e-6, 1e-6))
        << name;
  }
}

TEST(Checkpointing, GradientsAndBatchNormStatisticsMatchThePlainRun) {
  training::TrackingCpuAllocator::instance();
  const auto plain = forward_backward(CheckpointingOptions());
  for (auto granularity : {CheckpointGranularity::Block, CheckpointGranularity::Stage,
                           CheckpointGranularity::Segments}) {
    SCOPED_TRACE(static_cast<int>(granularity));
    expect_same(plain, forward_backward(CheckpointingOptions()
                                            .mode(training::CheckpointMode::On)
                                            .granularity(granularity)
                                            .segments(3)));
  }
}

TEST(Checkpointing, BottleneckModelMatchesToo) {
  const auto plain = forward_backward(CheckpointingOptions(), 50);
  expect_same(plain,
              forward_backward(CheckpointingOptions().mode(training::CheckpointMode::On), 50));
}

TEST(Checkpointing, PeakMemoryIsClearlyLower) {
  training::TrackingCpuAllocator::instance();
  const auto options = CheckpointingOptions()
                           .mode(training::CheckpointMode::On)
                           .granularity(CheckpointGranularity::Block);
  // ResNet-50 (16 blocks): one block's recomputation is a small part of all activations.
  const auto plain = forward_backward(CheckpointingOptions(), 50, models::Stem::Cifar, 16);
  const auto checkpointed = forward_backward(options, 50, models::Stem::Cifar, 16);
  std::cout << "peak above the model: plain " << plain.peak << " B, checkpointed "
            << checkpointed.peak << " B\n";
  EXPECT_LT(checkpointed.peak, plain.peak * 0.75);
}

TEST(Checkpointing, SegmentSizes) {
  const std::vector<int64_t> stages = {3, 4, 6, 3};
  EXPECT_EQ(training::checkpoint_segment_sizes(CheckpointingOptions(), stages),
            std::vector<int64_t>(16, 1));
  EXPECT_EQ(training::checkpoint_segment_sizes(
                CheckpointingOptions().granularity(CheckpointGranularity::Stage), stages),
            stages);
  EXPECT_EQ(
      training::checkpoint_segment_sizes(
          CheckpointingOptions().granularity(CheckpointGranularity::Segments).segments(3), stages),
      (std::vector<int64_t>{6, 5, 5}));
  EXPECT_EQ(
      training::checkpoint_segment_sizes(
          CheckpointingOptions().granularity(CheckpointGranularity::Segments).segments(99), stages),
      std::vector<int64_t>(16, 1));
}

// A segment that draws random numbers and records whether autocast was on when it ran.
struct RandomSegment {
  std::vector<bool> autocast_seen;
  models::Segment segment;
  RandomSegment() {
    segment.forward = [this](const torch::Tensor& x) {
      autocast_seen.push_back(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
      return x * (torch::rand_like(x) > 0.5).to(x.dtype());  // a dropout-like random mask
    };
  }
};

TEST(Checkpointing, RecomputationReplaysTheForwardRandomNumbers) {
  auto x = torch::randn({4096}, torch::requires_grad());
  RandomSegment plain, checkpointed;
  torch::manual_seed(3);
  plain.segment.forward(x).sum().backward();
  const auto expected = x.grad().clone();
  x.mutable_grad().reset();
  torch::manual_seed(3);
  auto out = training::checkpoint(checkpointed.segment, x);
  torch::rand({7});  // the global stream moves on before backward
  out.sum().backward();
  EXPECT_TRUE(x.grad().equal(expected));
  EXPECT_EQ(checkpointed.autocast_seen.size(), 2u);  // forward + recomputation
}

TEST(Checkpointing, RecomputationRestoresTheForwardAutocastState) {
  auto x = torch::randn({64}, torch::requires_grad());
  RandomSegment segment;
  torch::Tensor out;
  {
    training::AutocastGuard autocast(c10::DeviceType::CPU, training::Precision::BF16);
    out = training::checkpoint(segment.segment, x);
  }
  out.sum().backward();  // outside the autocast scope
  ASSERT_EQ(segment.autocast_seen.size(), 2u);
  EXPECT_TRUE(segment.autocast_seen[0]);
  EXPECT_TRUE(segment.autocast_seen[1]);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
}

TEST(Checkpointing, InputsWithoutGradRunPlainly) {
  RandomSegment segment;
  auto x = torch::randn({8});
  auto out = training::checkpoint(segment.segment, x);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_EQ(segment.autocast_seen.size(), 1u);
}

}  // namespace
