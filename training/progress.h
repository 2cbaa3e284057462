// The live progress line during an epoch: rewritten in place on a terminal, logged as ordinary
// lines otherwise (and always written to train.log).
#pragma once

#include <string>

namespace training {

struct ProgressSnapshot {
  int64_t epoch = 0, epochs = 0;
  int64_t batch = 0, batches = 0;  // batches done in this epoch / in the whole epoch
  double images_per_second = 0;
  double running_loss = 0, running_acc = 0;
  double lr = 0;
  double eta_seconds = 0;  // rest of this epoch's training
};

std::string format_progress(const ProgressSnapshot& snapshot);
std::string format_duration(double seconds);  // "1:02:03", "4:05"

class ProgressLine {
 public:
  ProgressLine();  // live when stderr is a terminal
  ~ProgressLine() { clear(); }
  void show(const ProgressSnapshot& snapshot);
  // Removes a live line so that the next log line starts on a clean row.
  void clear();

 private:
  bool live_;
  bool shown_ = false;
};

}  // namespace training
