// The measuring instruments that watch the loop: the profiler's window of steps (trace.json), the
// allocator's snapshot over the same window (memory_snapshot.pickle), and the device sampler
// (gpu.jsonl), whose utilisation and memory columns it adds to each epoch's record.
#pragma once

#include <memory>

#include "training/loop/observer.h"
#include "training/platform/memory_snapshot.h"
#include "training/platform/monitor.h"
#include "training/platform/profiler.h"

namespace training {

// A window of steps: the profiler's (trace.json) or the allocator snapshot's
// (memory_snapshot.pickle). Opened before the window's first step, closed after its last, or
// when the loop ends before it.
template <class Window>
class StepWindowObserver final : public LoopObserver {
 public:
  explicit StepWindowObserver(std::unique_ptr<Window> window) : window_(std::move(window)) {}
  void before_step(int64_t step) override { window_->before_step(step); }
  void after_step(int64_t step) override { window_->after_step(step); }
  void on_fit_end(int64_t step) override {
    if (window_->active()) window_->finish_early(step);
  }

 private:
  std::unique_ptr<Window> window_;
};

class SamplerObserver final : public LoopObserver {
 public:
  explicit SamplerObserver(std::unique_ptr<Sampler> sampler) : sampler_(std::move(sampler)) {}
  // The epoch's summary starts now.
  void on_epoch_start(int64_t) override { sampler_->take_summary(); }
  void on_batch(int64_t epoch, int64_t step) override { sampler_->set_position(epoch, step); }
  void complete_record(EpochRecord& record) override {
    sampler_->sample_now();  // a short epoch gets a sample too
    const SamplerSummary samples = sampler_->take_summary();
    record.utilization_mean = samples.utilization_mean;
    record.utilization_max = samples.utilization_max;
    record.memory_used_max_bytes = samples.memory_used_max;
  }

 private:
  std::unique_ptr<Sampler> sampler_;
};

}  // namespace training
