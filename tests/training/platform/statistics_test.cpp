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
