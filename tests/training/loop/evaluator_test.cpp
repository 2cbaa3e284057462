#include "training/loop/evaluator.h"

#include <gtest/gtest.h>

#include "training/config/config.h"
#include "training/parts/components.h"
#include "training/platform/memory.h"

namespace {

// ResNet-18 (ImageNet stem) on 64 synthetic test images resized to 128x128: a batch of 64 is
// 12 MiB of input alone, one of 32 half of it.
training::Config resized_config(int64_t workers) {
  auto c = training::parse_config(R"(
model: {arch: resnet18, stem: imagenet}
data: {source: synthetic, synthetic_train_size: 64, synthetic_test_size: 64, image_size: 128}
training: {device: cpu, batch_size: 8, eval_batch_size: 64, seed: 5}
)",
                                  "c.yaml");
  if (workers > 0) {
    c.data.loader = training::LoaderKind::TorchData;
    c.data.workers = workers;
  }
  return c;
}

training::Evaluation evaluate(const training::Config& config, int64_t limit_above_now) {
  auto options = config.data.dataset;
  options.synthetic_seed(static_cast<uint64_t>(config.training.seed));
  torch::manual_seed(7);  // the same weights for every evaluation compared
  models::ResNet model(config.model);
  model->eval();
  auto loader = training::make_loader(data::load_split(options, data::SplitName::Test), config,
                                      torch::kCPU, /*train=*/false, nullptr);
  training::Evaluator evaluator(config, torch::kCPU, nullptr);
  auto& allocator = training::TrackingCpuAllocator::instance();
  if (limit_above_now > 0) allocator.set_limit(allocator.stats().allocated + limit_above_now);
  try {
    const auto evaluation = evaluator.run(model, *loader);
    allocator.set_limit(0);
    return evaluation;
  } catch (...) {
    allocator.set_limit(0);
    throw;
  }
}

// Nineteenth pass: an evaluation batch that ran out of memory while it was made (resized to
// data.image_size, before any forward pass) ended the run with exit 3, where a forward pass that
// runs out is redone in halves. The split starts again in batches of half as many images, with
// the same results; each loader kind.
TEST(Evaluator, ABatchThatRunsOutOfMemoryBeingMadeIsMadeAgainInSmallerOnes) {
  for (const int64_t workers : {0, 1}) {
    const auto config = resized_config(workers);
    const auto whole = evaluate(config, 0);
    const auto limited = evaluate(config, int64_t{10} << 20);
    // Each image's loss is summed in float64; its logits, from kernels picked per batch size,
    // may differ in float32's last bits.
    EXPECT_NEAR(limited.loss, whole.loss, 1e-5 * whole.loss) << workers;
    EXPECT_EQ(limited.accuracy, whole.accuracy) << workers;
    EXPECT_LE(limited.memory.peak_allocated, whole.memory.peak_allocated - (int64_t{4} << 20));
  }
}

}  // namespace
