// The run report: <run>/report.md from the run's own files (config.yaml, metrics.jsonl,
// gpu.jsonl), with PNG plots drawn by scripts/plot_run.py:
//   loss_accuracy.png  train/test loss and accuracy per epoch
//   throughput.png     training images/s per epoch
//   memory.png         allocator peaks per epoch and sampled device memory (NVML used / RSS) over
//   time
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "training/epoch_record.h"

namespace training {

// A run's totals over its epochs: what the report's results and `train compare`'s columns show.
struct Totals {
  double train_seconds = 0, eval_seconds = 0, data_seconds = 0, images = 0;
  int64_t train_allocated = 0, train_reserved = 0, eval_allocated = 0, eval_reserved = 0;
  int64_t device_used = 0;
  std::optional<double> utilization_mean;  // over the epochs that were sampled
  size_t best = 0;                         // index of the epoch with the best test accuracy
};
Totals totals_of(const std::vector<EpochRecord>& epochs);

// Writes the report (atomically) and returns its path. Throws UserError when `run_dir` holds
// no run (no metrics.jsonl). Missing plots (no Python/matplotlib) are noted in the report.
std::filesystem::path write_report(const std::filesystem::path& run_dir);

}  // namespace training
