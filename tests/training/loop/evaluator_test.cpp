#include "training/loop/evaluator.h"

#include <gtest/gtest.h>

#include <utility>

#include "training/config/config.h"
#include "training/parts/components.h"
#include "training/platform/memory.h"

namespace {

// ResNet-18 (ImageNet stem) on 64 synthetic test images resized to 128x128: a batch of them all
// is 12 MiB of input alone, one of 32 half of it. The eval batch is larger than the split.
training::Config resized_config(training::LoaderKind kind) {
  // Each batch made when asked (no batch prepared ahead, whose memory depends on the timing).
  auto c = training::parse_config(R"(
model: {arch: resnet18, stem: imagenet}
data: {source: synthetic, synthetic_train_size: 64, synthetic_test_size: 64, image_size: 128,
       prefetch: 0, workers: 0}
training: {device: cpu, batch_size: 8, eval_batch_size: 100, seed: 5}
)",
                                  "c.yaml");
  c.data.loader = kind;
  return c;
}

// The evaluation, and the loader's batch size after it.
std::pair<training::Evaluation, int64_t> evaluate(const training::Config& config,
                                                  int64_t limit_above_now) {
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
    return {evaluation, loader->batch_size()};
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
  for (const auto kind : {training::LoaderKind::Batched, training::LoaderKind::TorchData}) {
    const auto config = resized_config(kind);
    const int workers = kind == training::LoaderKind::TorchData;  // which, in a failure's line
    const auto [whole, unchanged] = evaluate(config, 0);
    const auto [limited, halved] = evaluate(config, int64_t{12} << 20);
    EXPECT_EQ(unchanged, 100);
    // Halved from the 64 images a batch holds, how often depends on the CPU's kernels (a review:
    // from 100, three batches of 64 were made and dropped, and the line named batches of 100 and
    // 50 that never were): 32, 16, ..., never 50, 25, 12, 6.
    EXPECT_LT(halved, 64) << workers;
    EXPECT_EQ(64 % halved, 0) << halved << " " << workers;
    // Each image's loss is summed in float64; its logits, from kernels picked per batch size,
    // may differ in float32's last bits.
    EXPECT_NEAR(limited.loss, whole.loss, 1e-5 * whole.loss) << workers;
    EXPECT_EQ(limited.accuracy, whole.accuracy) << workers;
    EXPECT_LE(limited.memory.peak_allocated, whole.memory.peak_allocated - (int64_t{4} << 20));
  }
}

}  // namespace
