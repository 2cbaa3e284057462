// Learning-rate schedules as pure functions of the optimizer step, so a resumed run needs only
// the step count to continue on exactly the same curve.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <vector>

namespace training {

enum class ScheduleKind {
  Constant,  // lr after warm-up
  Cosine,    // cosine decay from lr to lr * min_lr_factor after warm-up
  OneCycle,  // PyTorch's OneCycleLR (cosine annealing, two phases); has its own warm-up
  Step,      // lr * gamma^(number of milestones passed), milestones in epochs
};

struct ScheduleOptions {
  TORCH_ARG(ScheduleKind, kind) = ScheduleKind::Cosine;
  TORCH_ARG(double, warmup_epochs) = 0.0;            // linear warm-up length (fractions allowed)
  TORCH_ARG(double, warmup_start_factor) = 0.1;      // warm-up starts at lr * this
  TORCH_ARG(double, min_lr_factor) = 0.0;            // cosine: final lr = lr * this
  TORCH_ARG(std::vector<int64_t>, milestones) = {};  // step: epochs where lr is multiplied
  TORCH_ARG(double, gamma) = 0.1;                    // step: the multiplier
  TORCH_ARG(double, pct_start) = 0.25;               // onecycle: fraction of steps spent rising
  TORCH_ARG(double, div_factor) = 25.0;              // onecycle: start lr = lr / div_factor
  TORCH_ARG(double, final_div_factor) = 1e4;         // onecycle: end lr = start lr / this
};

class LrSchedule {
 public:
  // `base_lr` is the peak rate; `total_steps` the length of the run (sets the cosine horizon).
  LrSchedule(ScheduleOptions options, double base_lr, int64_t steps_per_epoch, int64_t total_steps);
  // The rate for optimizer step `step` (0-based).
  double at(int64_t step) const;

 private:
  ScheduleOptions options_;
  double base_lr_;
  int64_t steps_per_epoch_;
  int64_t total_steps_;
  int64_t warmup_steps_;
};

}  // namespace training
