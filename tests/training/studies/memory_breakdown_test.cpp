// The memory breakdown of one step on the CPU (the tracking allocator counts exactly), for small
// ResNets with the CIFAR stem at tiny batches.
#include "training/studies/memory_breakdown.h"

#include <gtest/gtest.h>

#include <cmath>

#include "training/platform/device.h"

namespace {

using training::Precision;
using training::Setting;
using training::StepBreakdown;

training::Config config(const std::string& arch, int64_t batch) {
  return training::parse_config(
      "model: {arch: " + arch +
          ", stem: cifar}\ntraining: {device: cpu, batch_size: " + std::to_string(batch) + "}\n",
      "test");
}

StepBreakdown measure(const std::string& arch, int64_t batch, Setting cell,
                      int64_t timeline_points = 8192) {
  auto b = training::measure_breakdown(config(arch, batch), cell, timeline_points);
  EXPECT_EQ(b.status, training::TrialStatus::Ok) << b.message;
  return b;
}

using training::CheckpointMode;
const Setting fp32{Precision::FP32, CheckpointMode::Off, c10::MemoryFormat::Contiguous};
const Setting fp32_checkpointing{Precision::FP32, CheckpointMode::On,
                                 c10::MemoryFormat::Contiguous};
const Setting bf16{Precision::BF16, CheckpointMode::Off, c10::MemoryFormat::Contiguous};

// The residual blocks' rows (activations other than stem, head and autocast's copies).
std::vector<training::MemoryRow> block_rows(const StepBreakdown& b) {
  std::vector<training::MemoryRow> rows;
  for (const auto& row : b.rows) {
    if (row.group == training::RowGroup::Activations && row.stage.rfind("layer", 0) == 0)
      rows.push_back(row);
  }
  return rows;
}

int64_t block_bytes(const StepBreakdown& b) {
  int64_t total = 0;
  for (const auto& row : block_rows(b)) total += row.bytes;
  return total;
}

void expect_reconciles(const StepBreakdown& b) {
  ASSERT_GT(b.measured_peak_bytes, 0);
  EXPECT_LE(std::abs(static_cast<double>(b.unexplained_bytes())),
            0.10 * static_cast<double>(b.measured_peak_bytes))
      << b.setting.label() << ": itemized " << b.itemized_peak_bytes << ", measured "
      << b.measured_peak_bytes;
  int64_t at_peak = 0;
  for (const auto& row : b.rows) at_peak += row.at_peak ? row.bytes : 0;
  EXPECT_EQ(at_peak, b.itemized_peak_bytes);
}

TEST(MemoryBreakdown, ReconcilesWithTheMeasuredPeak) {
  for (const std::string arch : {"resnet18", "resnet50"}) {
    for (const auto& cell : {fp32, fp32_checkpointing}) {
      const auto b = measure(arch, 2, cell);
      expect_reconciles(b);
      EXPECT_EQ(block_rows(b).size(), arch == "resnet18" ? 8u : 16u);
    }
  }
}

// training.accumulate_steps 2: the probed step is a group's last micro-batch, with the first's
// gradients held through it. They are a row at the peak, the breakdown still reconciles, and the
// peak is above one step's by at most the gradients.
TEST(MemoryBreakdown, AccumulationHoldsTheGradientsThroughTheStep) {
  const auto single = measure("resnet18", 8, fp32);
  Setting accumulating = fp32;
  accumulating.accumulate_steps = 2;
  const auto b = training::measure_breakdown(config("resnet18", 8), accumulating);
  ASSERT_EQ(b.status, training::TrialStatus::Ok) << b.message;
  expect_reconciles(b);
  const int64_t gradients = 11173962LL * 4;
  bool found = false;
  for (const auto& row : b.rows) {
    if (row.name != "gradients (accumulated)") continue;
    found = true;
    EXPECT_EQ(row.bytes, gradients);
    EXPECT_TRUE(row.at_peak);
  }
  EXPECT_TRUE(found);
  EXPECT_GT(b.measured_peak_bytes, single.measured_peak_bytes);
  EXPECT_LE(b.measured_peak_bytes, single.measured_peak_bytes + gradients);
}

// The static rows are what the tensors hold: ResNet-18's 11,173,962 parameters (CIFAR stem: a 3x3
// first convolution) in fp32, the same again as momentum; the batch is 2 x 3 x 32 x 32 floats and 2
// labels.
TEST(MemoryBreakdown, StaticRowsAreTheTensorsSizes) {
  const auto b = measure("resnet18", 2, fp32);
  const auto row = [&](const std::string& name) {
    for (const auto& r : b.rows) {
      if (r.name == name) return r.bytes;
    }
    ADD_FAILURE() << "no row " << name;
    return int64_t{0};
  };
  EXPECT_EQ(row("optimizer state (momentum)"), 11173962 * 4);
  EXPECT_EQ(row("gradients"), 11173962 * 4);
  EXPECT_GT(row("weights and buffers"), 11173962 * 4);  // plus BatchNorm's running statistics
  EXPECT_EQ(row("batch (images, labels)"), 2 * 3 * 32 * 32 * 4 + 2 * 8);
  // No library keeps a workspace in the CPU allocator between steps.
  EXPECT_EQ(row("library workspaces"), 0);
}

TEST(MemoryBreakdown, ActivationsScaleLinearlyWithTheBatch) {
  const auto small = measure("resnet18", 2, fp32), large = measure("resnet18", 4, fp32);
  const auto a = block_rows(small), b = block_rows(large);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double ratio = static_cast<double>(b[i].bytes) / static_cast<double>(a[i].bytes);
    EXPECT_NEAR(ratio, 2.0, 0.1) << a[i].name;
    EXPECT_EQ(b[i].shape.at(0), 4);
  }
}

// With a checkpoint per block, a block keeps only its output (the next block's saved input);
// without, it keeps every intermediate its backward needs.
TEST(MemoryBreakdown, CheckpointingRemovesTheInnerActivations) {
  const auto plain = measure("resnet18", 4, fp32),
             checkpointed = measure("resnet18", 4, fp32_checkpointing);
  const auto a = block_rows(plain), b = block_rows(checkpointed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t output = 4;  // float32
    for (int64_t size : b[i].shape) output *= size;
    EXPECT_LE(b[i].bytes, output * 105 / 100) << b[i].name;
    EXPECT_GE(a[i].bytes, 3 * b[i].bytes) << a[i].name;
  }
  EXPECT_LT(block_bytes(checkpointed), block_bytes(plain) / 3);
}

// checkpointing auto: the blocks it chose (here given, as a resumed run's config holds them) keep
// only their output; the others keep everything, as without checkpointing.
TEST(MemoryBreakdown, AutoCheckpointingRecomputesOnlyItsBlocks) {
  auto given = config("resnet18", 4);
  given.checkpointing.blocks(std::vector<std::string>{"layer1.1", "layer3.0"});
  const Setting automatic{Precision::FP32, CheckpointMode::Auto, c10::MemoryFormat::Contiguous};
  const auto chosen = training::measure_breakdown(given, automatic);
  ASSERT_EQ(chosen.status, training::TrialStatus::Ok) << chosen.message;
  EXPECT_EQ(chosen.recomputed_blocks, (std::vector<std::string>{"layer1.1", "layer3.0"}));
  const auto plain = measure("resnet18", 4, fp32),
             checkpointed = measure("resnet18", 4, fp32_checkpointing);
  const auto a = block_rows(plain), b = block_rows(checkpointed), c = block_rows(chosen);
  ASSERT_EQ(c.size(), a.size());
  for (size_t i = 0; i < c.size(); ++i) {
    const bool recomputed = c[i].name == "layer1.1" || c[i].name == "layer3.0";
    EXPECT_EQ(c[i].bytes, recomputed ? b[i].bytes : a[i].bytes) << c[i].name;
  }
  EXPECT_LT(block_bytes(chosen), block_bytes(plain));
  EXPECT_GT(block_bytes(chosen), block_bytes(checkpointed));
}

TEST(MemoryBreakdown, Bf16HalvesTheActivations) {
  if (!training::cpu_has_native_bf16()) {
    GTEST_SKIP() << "this CPU has no native bf16 (emulated bf16 is ~300x slower)";
  }
  const auto full = measure("resnet18", 2, fp32), half = measure("resnet18", 2, bf16);
  const double ratio =
      static_cast<double>(block_bytes(half)) / static_cast<double>(block_bytes(full));
  EXPECT_NEAR(ratio, 0.5, 0.1);
  // The low-precision weight copies autocast caches are their own row: 2 bytes per weight of
  // the convolutions and the linear layer.
  EXPECT_GT(half.sum(training::RowGroup::Activations, "autocast"), 11000000 * 2);
  EXPECT_EQ(full.sum(training::RowGroup::Activations, "autocast"), 0);
  expect_reconciles(half);
}

// The timeline runs through the phases in order, holds the step's peak, and stays bounded.
TEST(MemoryBreakdown, TimelineHasThePhasesAndThePeak) {
  const auto b = measure("resnet18", 2, fp32, 64);
  std::vector<std::string> labels;
  for (const auto& mark : b.marks) labels.push_back(mark.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"forward", "layer1", "layer2", "layer3", "layer4",
                                              "head", "backward", "optimizer", "end"}));
  EXPECT_LE(b.timeline.size(), 65u);
  EXPECT_GT(b.timeline_events, 64);
  int64_t most = 0;
  for (const auto& p : b.timeline) most = std::max(most, p.bytes);
  EXPECT_EQ(most, b.measured_peak_bytes);
}

}  // namespace
