// memory.snapshot (CUDA only): the caching allocator's history over profiler.steps as the pickle
// https://pytorch.org/memory_viz opens (<run>/memory_snapshot.pickle); a card's predicted one, on
// any machine: training/cards/allocator_snapshot.h.
#pragma once

#include <torch/types.h>

#include <filesystem>

namespace training {

class StepMemorySnapshot {
 public:
  // Steps: 1-based optimizer steps, inclusive; the newest `max_entries` events are kept.
  StepMemorySnapshot(int64_t first_step, int64_t last_step, int64_t max_entries,
                     std::filesystem::path file, torch::Device device);
  // Call before and after optimizer step `step`: recording starts before the first step of the
  // window and the snapshot is written after its last.
  void before_step(int64_t step);
  void after_step(int64_t step);
  // The run ended at `last_step`, inside the window: writes what was recorded.
  void finish_early(int64_t last_step);
  bool active() const { return active_; }

 private:
  void stop(int64_t last_step);

  int64_t first_step_, last_step_, max_entries_;
  std::filesystem::path file_;
  torch::Device device_;
  bool active_ = false;
  bool done_ = false;
};

}  // namespace training
