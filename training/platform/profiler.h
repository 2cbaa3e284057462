// The LibTorch (Kineto) profiler over a window of training steps: a Chrome trace of those steps
// (CPU ops, and CUDA kernels and copies on a GPU) that opens in Perfetto or chrome://tracing,
// plus a top-N operator table by self time, like prof.key_averages().table(sort_by=...).
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <filesystem>
#include <string>

namespace training {

struct ProfilerOptions {
  TORCH_ARG(bool, enabled) = false;
  TORCH_ARG(int64_t, first_step) = 5;  // 1-based global optimizer steps, inclusive
  TORCH_ARG(int64_t, last_step) = 7;
  TORCH_ARG(int64_t, top) = 15;  // rows of the operator table
  TORCH_ARG(bool, record_shapes) = false;
};

class StepProfiler {
 public:
  StepProfiler(ProfilerOptions options, std::filesystem::path trace_file, torch::Device device);
  ~StepProfiler();
  // Call before and after optimizer step `step` (1-based). Starting, stopping, saving the trace
  // and logging the table happen inside.
  void before_step(int64_t step);
  void after_step(int64_t step);
  // The run ended at `last_step`, inside the window: writes what was traced and says so.
  void finish_early(int64_t last_step);
  bool active() const { return active_; }
  bool done() const { return done_; }

 private:
  void stop(int64_t last_step);

  ProfilerOptions options_;
  std::filesystem::path trace_file_;
  torch::Device device_;
  bool active_ = false;
  bool done_ = false;
};

}  // namespace training
