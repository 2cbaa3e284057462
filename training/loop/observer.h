// What watches the training loop without steering it: progress lines, TensorBoard, the
// profiler's window, the allocator's snapshot, the device sampler. The loop (trainer.h) tells
// each observer of its moments, in the order they were added; an observer only reads what it is
// given (the sampler alone adds its columns to the epoch's record). Modelled on Lightning's
// callbacks: on train start, around a step, at a log interval, at an epoch's end, at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "training/loop/progress.h"
#include "training/run/checkpoint_io.h"
#include "training/run/epoch_record.h"

namespace training {

// One of two observer interfaces, split by where they look: this one sees the loop between steps
// (epochs, batches, intervals, records); step/step.h's StepObserver sees inside one micro-batch.
class LoopObserver {
 public:
  virtual ~LoopObserver() = default;
  // Before the first step of this process; `state` is where the run stands (resumed or fresh),
  // `trains_on` whether any step is left to train.
  virtual void on_fit_start(const TrainState& state, bool trains_on) {
    (void)state, (void)trains_on;
  }
  // Epoch `epoch` starts (or continues, when resumed part-way) its training.
  virtual void on_epoch_start(int64_t epoch) { (void)epoch; }
  // Training step `step` (counted from 1) of epoch `epoch` has its batch; then, once the ranks
  // share rank 0's buffers, around the step itself.
  virtual void on_batch(int64_t epoch, int64_t step) { (void)epoch, (void)step; }
  virtual void before_step(int64_t step) { (void)step; }
  virtual void after_step(int64_t step) { (void)step; }
  virtual void on_interval(const Interval& interval) { (void)interval; }
  // The epoch's training phase is over (its evaluation comes next).
  virtual void on_training_end() {}
  // The epoch's record before it is written: an observer that measured something adds it.
  virtual void complete_record(EpochRecord& record) { (void)record; }
  // The epoch's record is written (metrics.jsonl, when writing a run).
  virtual void on_epoch_end(const EpochRecord& record) { (void)record; }
  // The loop ended (finished, or stopped before its last step) at `step`.
  virtual void on_fit_end(int64_t step) { (void)step; }
};

// The observers as one: each moment is told to every observer, in the order they were added.
class Observers final : public LoopObserver {
 public:
  void add(std::unique_ptr<LoopObserver> observer) {
    if (observer) all_.push_back(std::move(observer));
  }
  void on_fit_start(const TrainState& state, bool trains_on) override {
    each(&LoopObserver::on_fit_start, state, trains_on);
  }
  void on_epoch_start(int64_t epoch) override { each(&LoopObserver::on_epoch_start, epoch); }
  void on_batch(int64_t epoch, int64_t step) override {
    each(&LoopObserver::on_batch, epoch, step);
  }
  void before_step(int64_t step) override { each(&LoopObserver::before_step, step); }
  void after_step(int64_t step) override { each(&LoopObserver::after_step, step); }
  void on_interval(const Interval& interval) override {
    each(&LoopObserver::on_interval, interval);
  }
  void on_training_end() override { each(&LoopObserver::on_training_end); }
  void complete_record(EpochRecord& record) override {
    for (auto& observer : all_) observer->complete_record(record);
  }
  void on_epoch_end(const EpochRecord& record) override {
    each(&LoopObserver::on_epoch_end, record);
  }
  void on_fit_end(int64_t step) override { each(&LoopObserver::on_fit_end, step); }

 private:
  template <class Moment, class... Args>
  void each(Moment moment, const Args&... args) {
    for (auto& observer : all_) ((*observer).*moment)(args...);
  }

  std::vector<std::unique_ptr<LoopObserver>> all_;
};

}  // namespace training
