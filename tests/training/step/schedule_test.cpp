#include "training/step/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

using training::LrSchedule;
using training::ScheduleKind;
using training::ScheduleOptions;

TEST(Schedule, LinearWarmupThenConstant) {
  LrSchedule s(
      ScheduleOptions().kind(ScheduleKind::Constant).warmup_epochs(2).warmup_start_factor(0.1), 1.0,
      /*steps_per_epoch=*/10, /*total_steps=*/100);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(10), 0.55);
  EXPECT_DOUBLE_EQ(s.at(20), 1.0);
  EXPECT_DOUBLE_EQ(s.at(99), 1.0);
}

TEST(Schedule, CosineStartsAfterWarmupAndEndsAtTheFloor) {
  LrSchedule s(ScheduleOptions().kind(ScheduleKind::Cosine).warmup_epochs(1).min_lr_factor(0.01),
               0.4, 10, 110);
  EXPECT_DOUBLE_EQ(s.at(10), 0.4);
  EXPECT_NEAR(s.at(60), 0.4 * (0.01 + 0.99 * 0.5), 1e-12);  // half way through the decay
  EXPECT_NEAR(s.at(110), 0.004, 1e-12);
  EXPECT_LT(s.at(80), s.at(70));
}

TEST(Schedule, StepMultipliesAtMilestoneEpochs) {
  LrSchedule s(ScheduleOptions().kind(ScheduleKind::Step).milestones({2, 4}).gamma(0.1), 1.0, 5,
               50);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);     // epoch 1 (0-based)
  EXPECT_NEAR(s.at(10), 0.1, 1e-15);  // epoch 2
  EXPECT_NEAR(s.at(20), 0.01, 1e-15);
}

// Reference values from torch.optim.lr_scheduler.OneCycleLR(max_lr=0.1, total_steps=100,
// pct_start=0.25, cycle_momentum=False) in torch 2.11.0.
TEST(Schedule, OneCycleMatchesPyTorch) {
  LrSchedule s(ScheduleOptions().kind(ScheduleKind::OneCycle).pct_start(0.25), 0.1, 10, 100);
  EXPECT_NEAR(s.at(0), 0.004, 1e-12);
  EXPECT_NEAR(s.at(10), 0.039576685835079006, 1e-12);
  EXPECT_NEAR(s.at(24), 0.1, 1e-12);
  EXPECT_NEAR(s.at(50), 0.07316490909678607, 1e-12);
  EXPECT_NEAR(s.at(99), 4e-07, 1e-15);
}

TEST(Schedule, IsAPureFunctionOfTheStep) {
  LrSchedule a(ScheduleOptions(), 0.1, 7, 70), b(ScheduleOptions(), 0.1, 7, 70);
  for (int64_t step : {33, 5, 69, 0}) EXPECT_EQ(a.at(step), b.at(step));
}

}  // namespace
