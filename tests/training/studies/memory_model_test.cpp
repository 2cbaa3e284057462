#include "training/studies/memory_model.h"

#include <gtest/gtest.h>

#include "training/studies/sweep.h"

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
  // No larger than training.batch_size takes (round 5: 2,718,219,420 for 1024TiB).
  EXPECT_EQ(fit->max_batch(int64_t{1} << 50), training::kMaxBatchSize);
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

}  // namespace
