// The loop on the console (and in train.log): the progress line at each log interval (rewritten
// in place on a terminal), the epoch's line with its memory peaks, and the hints and findings that
// follow it (evaluation sets the peak, the fp16 loss scale, diagnosis.h's findings).
#pragma once

#include <torch/types.h>

#include "training/config/config.h"
#include "training/loop/observer.h"
#include "training/loop/progress.h"

namespace training {

class ConsoleObserver final : public LoopObserver {
 public:
  ConsoleObserver(const Config& config, torch::Device device);
  void on_interval(const Interval& interval) override { progress_.show(interval); }
  void on_training_end() override { progress_.clear(); }
  void on_epoch_end(const EpochRecord& record) override;

 private:
  const Config& config_;
  torch::Device device_;
  ProgressLine progress_;
  bool said_evaluation_peak_ = false;  // the "evaluation sets the peak" hint is logged once
};

}  // namespace training
