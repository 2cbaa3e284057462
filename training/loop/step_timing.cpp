#include "training/loop/step_timing.h"

#include <algorithm>

#include "training/platform/device.h"

namespace training {

namespace {

double seconds_between(StepTiming::Clock::time_point from, StepTiming::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

void StepTiming::begin_epoch(Clock::time_point start) {
  warmup_steps_ = 0;
  steady_steps_ = 0;
  steady_images_ = 0;
  // Where this epoch's steady steps start: now, or after the process's last warm-up step.
  steady_start_.reset();
  if (process_steps_ >= kWarmupSteps) steady_start_ = start;
  if (!training_start_) training_start_ = start;
}

bool StepTiming::count_step(int64_t images) {
  if (++process_steps_ <= kWarmupSteps) {
    ++warmup_steps_;
    if (process_steps_ == kWarmupSteps) {
      synchronize(device_);  // once per process: the warm-up's queued work is done
      steady_start_ = Clock::now();
    }
  } else {
    ++steady_steps_;
    steady_images_ += images;
  }
  if (projected_ || steady_steps_ != kProjectionSteps) return false;
  projected_ = true;
  return true;
}

double StepTiming::end_epoch(Clock::time_point start) {
  const auto end = Clock::now();
  // The warm-up's share ends where the steady steps start; an epoch without a step after the
  // warm-up is warm-up throughout.
  const bool steady = steady_start_ && steady_steps_ > 0;
  steady_seconds_ = steady ? seconds_between(*steady_start_, end) : 0.0;
  warmup_seconds_ = seconds_between(start, steady ? *steady_start_ : end);
  return seconds_between(start, end);
}

std::optional<double> StepTiming::steady_rate() const {
  if (steady_steps_ == 0) return std::nullopt;
  return static_cast<double>(steady_images_) /
         std::max(seconds_between(*steady_start_, Clock::now()), 1e-9);
}

double StepTiming::seconds_training() const {
  return training_start_ ? seconds_between(*training_start_, Clock::now()) : 0.0;
}

}  // namespace training
