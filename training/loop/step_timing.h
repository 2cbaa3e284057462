// The warm-up and steady-state clock of the training steps. The first kWarmupSteps steps a
// process trains are warm-up (cuDNN's autotuning, first allocations, a graph's warm-up and
// capture: GraphedStep::kWarmupSteps + 1): timed apart in the epoch records, never averaged into
// the steady images/s, the ETA or the long-run projection.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <optional>

namespace training {

class StepTiming {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int64_t kWarmupSteps = 5;
  // Steady steps the long-CPU-run projection waits for (then judged once).
  static constexpr int64_t kProjectionSteps = 3;

  explicit StepTiming(torch::Device device) : device_(device) {}

  // An epoch's training starts at `start` (the device synchronised).
  void begin_epoch(Clock::time_point start);
  // A step of `images` was trained. True once per process: the step after which the steady
  // steps suffice for the projection (kProjectionSteps).
  bool count_step(int64_t images);
  // The epoch's training ends now (the device synchronised): its seconds since `start`, split
  // into warm-up and steady seconds.
  double end_epoch(Clock::time_point start);

  // Images/s of this epoch's steady steps so far; empty while the process still warms up.
  std::optional<double> steady_rate() const;
  int64_t process_steps() const { return process_steps_; }
  // Seconds since this process started training (for progress_due_by_time).
  double seconds_training() const;
  int64_t warmup_steps() const { return warmup_steps_; }
  double warmup_seconds() const { return warmup_seconds_; }
  double steady_seconds() const { return steady_seconds_; }
  int64_t steady_images() const { return steady_images_; }

 private:
  torch::Device device_;
  int64_t process_steps_ = 0;  // steps this process has trained so far
  // This epoch's warm-up steps and seconds, and its steady start, seconds, steps and images.
  int64_t warmup_steps_ = 0;
  double warmup_seconds_ = 0, steady_seconds_ = 0;
  std::optional<Clock::time_point> steady_start_;
  int64_t steady_steps_ = 0, steady_images_ = 0;
  std::optional<Clock::time_point> training_start_;  // when this process started training
  bool projected_ = false;                           // count_step said the projection is due
};

}  // namespace training
