// The loop in TensorBoard's event files (monitor.tensorboard): the progress scalars at each log
// interval and the epoch's record; a resumed run writes a restart first, so that the event files
// agree with metrics.jsonl.
#pragma once

#include <filesystem>

#include "training/loop/observer.h"
#include "training/platform/tensorboard.h"

namespace training {

class TensorBoardObserver final : public LoopObserver {
 public:
  // A new event file in `run_dir`; whether the folder holds an earlier session's is read now.
  explicit TensorBoardObserver(const std::filesystem::path& run_dir);
  void on_fit_start(const TrainState& state, bool trains_on) override;
  void on_interval(const Interval& interval) override;
  void on_epoch_end(const EpochRecord& record) override;

 private:
  std::filesystem::path run_dir_;
  bool earlier_events_;  // the run directory holds event files of an earlier session
  EventWriter events_;
};

}  // namespace training
