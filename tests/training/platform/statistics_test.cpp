#include "training/platform/statistics.h"

#include <gtest/gtest.h>

namespace {

TEST(Median, OddCountIsTheMiddleOfTheSortedValues) {
  EXPECT_DOUBLE_EQ(training::median({5.0, 1.0, 9.0}), 5.0);
}

TEST(Median, EvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(training::median({4.0, 1.0, 100.0, 2.0}), 3.0);
}

TEST(Median, NoValuesGiveZero) {
  EXPECT_DOUBLE_EQ(training::median({}), 0.0);
}

}  // namespace

// Thirteenth pass: a measured 0.43 img/s was shown as 0 in sweep.md and the log, which reads as
// nothing measured.
TEST(Statistics, ARateIsNeverShownAsZeroAndWholeFromTen) {
  EXPECT_EQ(training::rate_text(0.43), "0.43");
  EXPECT_EQ(training::rate_text(3.44), "3.4");
  EXPECT_EQ(training::rate_text(9.96), "10");
  EXPECT_EQ(training::rate_text(1534.4), "1534");
}
