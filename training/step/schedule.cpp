#include "training/step/schedule.h"

#include <algorithm>
#include <cmath>

namespace training {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Cosine interpolation from `start` (pct 0) to `end` (pct 1).
double anneal_cos(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0);
}

}  // namespace

LrSchedule::LrSchedule(ScheduleOptions options, double base_lr, int64_t steps_per_epoch,
                       int64_t total_steps)
    : options_(std::move(options)),
      base_lr_(base_lr),
      steps_per_epoch_(std::max<int64_t>(steps_per_epoch, 1)),
      total_steps_(std::max<int64_t>(total_steps, 1)),
      warmup_steps_(
          std::llround(options_.warmup_epochs() * static_cast<double>(steps_per_epoch_))) {}

double LrSchedule::at(int64_t step) const {
  if (options_.kind() == ScheduleKind::OneCycle) {
    // Same phase boundaries as torch.optim.lr_scheduler.OneCycleLR(three_phase=False).
    const double initial = base_lr_ / options_.div_factor();
    const double minimum = initial / options_.final_div_factor();
    const double peak_step = options_.pct_start() * static_cast<double>(total_steps_) - 1.0;
    const double last_step = static_cast<double>(total_steps_) - 1.0;
    const double s = static_cast<double>(step);
    if (s <= peak_step) return anneal_cos(initial, base_lr_, peak_step > 0 ? s / peak_step : 1.0);
    const double span = last_step - peak_step;
    return anneal_cos(base_lr_, minimum, span > 0 ? std::min(1.0, (s - peak_step) / span) : 1.0);
  }

  if (step < warmup_steps_) {
    const double progress = static_cast<double>(step) / static_cast<double>(warmup_steps_);
    const double start = options_.warmup_start_factor();
    return base_lr_ * (start + (1.0 - start) * progress);
  }
  switch (options_.kind()) {
    case ScheduleKind::Constant:
      return base_lr_;
    case ScheduleKind::Cosine: {
      const double span = static_cast<double>(std::max<int64_t>(total_steps_ - warmup_steps_, 1));
      const double progress = std::min(1.0, static_cast<double>(step - warmup_steps_) / span);
      const double floor = options_.min_lr_factor();
      return base_lr_ * (floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(kPi * progress)));
    }
    case ScheduleKind::Step: {
      const int64_t epoch = step / steps_per_epoch_;
      const auto passed = std::count_if(options_.milestones().begin(), options_.milestones().end(),
                                        [&](int64_t m) { return epoch >= m; });
      return base_lr_ * std::pow(options_.gamma(), static_cast<double>(passed));
    }
    case ScheduleKind::OneCycle:
      break;
  }
  return base_lr_;
}

}  // namespace training
