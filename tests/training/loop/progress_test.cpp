#include "training/loop/progress.h"

#include <gtest/gtest.h>

namespace {

// The first line once 3 steps and 10 s have passed, whichever is later; then every 30 s.
TEST(Progress, TheFirstLineComesAfterThreeStepsAndTenSecondsThenEveryThirtySeconds) {
  EXPECT_FALSE(training::progress_due_by_time(false, 2, 60.0, 60.0));  // a slow first steps
  EXPECT_TRUE(training::progress_due_by_time(false, 3, 60.0, 60.0));
  EXPECT_FALSE(training::progress_due_by_time(false, 500, 9.9, 9.9));  // fast steps: wait 10 s
  EXPECT_TRUE(training::progress_due_by_time(false, 500, 10.0, 10.0));
  EXPECT_FALSE(training::progress_due_by_time(true, 4, 100.0, 29.9));
  EXPECT_TRUE(training::progress_due_by_time(true, 4, 100.0, 30.0));
}

// The ETA is said only once a steady rate gives it.
TEST(Progress, TheLineSaysWhenTheEtaIsNotKnownYet) {
  training::Interval s{1, 30, 3, 3, 390, 25.0, 2.3, 0.1, 0.01, std::nullopt};
  EXPECT_EQ(
      training::format_progress(s),
      "epoch 1/30  step 3/390  25 img/s  loss 2.3000  acc 10.00%  lr 0.01  ETA after warm-up");
  s.eta_seconds = 3725.0;
  EXPECT_NE(training::format_progress(s).find("ETA 1:02:05"), std::string::npos);
}

}  // namespace
