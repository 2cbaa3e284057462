#include "training/memory_model.h"

#include <gtest/gtest.h>

#include "training/sweep.h"

namespace {

TEST(MemoryFit, RecoversAnExactLine) {
  const auto fit =
      training::fit_memory({8, 16, 32}, {1000 + 8 * 50, 1000 + 16 * 50, 1000 + 32 * 50});
  ASSERT_TRUE(fit);
  EXPECT_NEAR(fit->intercept, 1000, 1e-6);
  EXPECT_NEAR(fit->slope, 50, 1e-9);
  EXPECT_NEAR(fit->r_squared, 1.0, 1e-12);
  EXPECT_EQ(fit->points, 3);
  EXPECT_EQ(fit->max_batch(1000 + 50 * 40), 40);
  EXPECT_EQ(fit->max_batch(1000 + 50 * 40 + 49), 40);
  EXPECT_EQ(fit->max_batch(500), 0);
}

TEST(MemoryFit, NoisyPointsGiveRSquaredBelowOne) {
  const auto fit = training::fit_memory({1, 2, 3, 4}, {10, 21, 29, 42});
  ASSERT_TRUE(fit);
  EXPECT_LT(fit->r_squared, 1.0);
  EXPECT_GT(fit->r_squared, 0.98);
}

TEST(MemoryFit, NeedsTwoDistinctBatchSizes) {
  EXPECT_FALSE(training::fit_memory({8, 8}, {100, 101}));
  EXPECT_FALSE(training::fit_memory({8}, {100}));
  EXPECT_FALSE(training::fit_memory({}, {}));
}

TEST(MemoryFit, FlatMemoryPredictsNoLimit) {
  const auto fit = training::fit_memory({8, 16}, {100, 100});
  ASSERT_TRUE(fit);
  EXPECT_FALSE(fit->max_batch(1000).has_value());
}

training::SweepTrial trial(int64_t batch, training::TrialStatus status, int64_t peak, double ips,
                           bool checkpointing = false) {
  training::SweepTrial t;
  t.cell.checkpointing = checkpointing;
  t.batch = batch;
  t.result.status = status;
  t.result.peak_reserved_bytes = peak;
  t.result.images_per_second = ips;
  return t;
}

TEST(Summarize, FindsLargestFittingFastestAndFitsPerCell) {
  constexpr auto Ok = training::TrialStatus::Ok;
  constexpr auto OutOfMemory = training::TrialStatus::OutOfMemory;
  constexpr auto Error = training::TrialStatus::Error;
  const std::vector<training::SweepCell> cells = {{}, {training::Precision::FP32, true}};
  const std::vector<training::SweepTrial> trials = {
      trial(8, Ok, 180, 100), trial(16, Ok, 260, 150), trial(32, OutOfMemory, 300, 0),
      trial(24, Ok, 340, 140), trial(8, Error, 0, 0, true)};
  const auto summaries = training::summarize(cells, trials, {500}, true);
  ASSERT_EQ(summaries.size(), 2u);
  const auto& plain = summaries[0];
  EXPECT_EQ(plain.largest_fitting, 24);
  EXPECT_EQ(plain.smallest_failing, 32);
  EXPECT_EQ(plain.fastest_batch, 16);
  EXPECT_DOUBLE_EQ(plain.fastest_images_per_second, 150);
  ASSERT_TRUE(plain.fit);
  EXPECT_NEAR(plain.fit->slope, 10, 1e-9);
  EXPECT_EQ(plain.predictions[0].second, 40);  // 100 + 10 * 40 = 500
  const auto& failed = summaries[1];
  EXPECT_FALSE(failed.largest_fitting);
  EXPECT_FALSE(failed.fit);
  EXPECT_FALSE(failed.predictions[0].second);
}

}  // namespace
