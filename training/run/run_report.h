// The run report: <run>/report.md from the run's own files (config.yaml, metrics.jsonl,
// gpu.jsonl), with PNG plots drawn by scripts/plot_run.py:
//   loss_accuracy.png  train/test loss and accuracy per epoch
//   throughput.png     training images/s per epoch
//   memory.png         allocator peaks per epoch, sampled device memory (NVML used / RSS) in time
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "training/config/config.h"
#include "training/run/epoch_record.h"
#include "training/run/run_dir.h"

namespace training {

// A run's totals over its epochs: what the report's results and `train compare`'s columns show.
struct Totals {
  double train_seconds = 0, eval_seconds = 0, data_seconds = 0, images = 0;
  int64_t train_allocated = 0, train_reserved = 0, eval_allocated = 0, eval_reserved = 0;
  int64_t device_used = 0;
  std::optional<double> utilization_mean;  // over the epochs that were sampled
  size_t best = 0;                         // index of the epoch with the best test accuracy
  // Steady state: the warm-up's steps and seconds, and the images/s of the steps after it (the
  // epochs' steady rates weighted by their steady time; null when no epoch has one).
  int64_t warmup_steps = 0;
  double warmup_seconds = 0;
  std::optional<double> steady_images_per_second;
  // The time per epoch: the mean over whole epochs, or, when the run trained none (stopped by
  // training.max_steps), the projection of its partial epoch (epoch_record.h's epoch_time).
  std::optional<EpochTime> epoch_time;
};
Totals totals_of(const std::vector<EpochRecord>& epochs);

// Where a run that has not reached its end stands: from its checkpoint ("in epoch 2 after step 18,
// before the end of its 2 epoch(s)"; `resumable`), else from its last epoch recorded; nullopt for
// a run that reached its end or diverged (its own row says where).
struct Stopped {
  std::string where;
  bool resumable = false;  // a readable checkpoint.pt continues it
};
std::optional<Stopped> stopped_at(const RunRecord& run, const Config& config);

// "12.90 s", "2014.3 s, projected from 25 steady steps", "-" (no steady step to project from).
std::string format_epoch_time(const std::optional<EpochTime>& time);

// Writes the report (atomically) and returns its path. Throws UserError when `run_dir` holds
// no run (no metrics.jsonl). Missing plots (no Python/matplotlib) are noted in the report. A run
// that has not reached its end is said to be stopped, or, `in_training` (another process holds
// it), still training.
std::filesystem::path write_report(const std::filesystem::path& run_dir, bool in_training = false);

// `train report RUN`: when no process holds the run, takes its lock for the report and first
// removes the temporaries an interrupted write left, as --resume does (a training run's own are
// left to it); then write_report().
std::filesystem::path report_command(const std::filesystem::path& run_dir);

}  // namespace training
