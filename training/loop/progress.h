// The live progress line during an epoch: rewritten in place on a terminal, logged as ordinary
// lines otherwise (and always written to train.log).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "training/platform/duration.h"  // format_duration

namespace training {

// What the loop read back at a log interval (the running sums waited for the queued steps).
struct Interval {
  int64_t epoch = 0, epochs = 0;
  int64_t step = 0;                // steps done in the run
  int64_t batch = 0, batches = 0;  // batches done in this epoch / in the whole epoch
  double images_per_second = 0;    // over the interval
  double loss = 0, accuracy = 0;   // running, over the epoch so far
  double lr = 0;
  // The rest of this epoch's training at the steady rate; empty while the process warms up.
  std::optional<double> eta_seconds;
};

// When a progress line is due by time (training.log_every_steps makes the others): the first once
// the process has trained kFirstLineSteps steps and kFirstLineSeconds seconds, whichever comes
// later, then kEverySeconds after the last line. `steps` and `seconds` count from the start of
// training in this process; `since_last` from the last line (ignored before the first).
constexpr int64_t kFirstLineSteps = 3;
constexpr double kFirstLineSeconds = 10.0;
constexpr double kEverySeconds = 30.0;
bool progress_due_by_time(bool shown_before, int64_t steps, double seconds, double since_last);

std::string format_progress(const Interval& interval);

class ProgressLine {
 public:
  ProgressLine();  // live when stderr is a terminal
  ~ProgressLine() { clear(); }
  void show(const Interval& interval);
  // Removes a live line so that the next log line starts on a clean row.
  void clear();

 private:
  bool live_;
  bool shown_ = false;
};

}  // namespace training
