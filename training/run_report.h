// The run report: <run>/report.md from the run's own files (config.yaml, metrics.jsonl,
// gpu.jsonl), with PNG plots drawn by scripts/plot_run.py:
//   loss_accuracy.png  train/test loss and accuracy per epoch
//   throughput.png     training images/s per epoch
//   memory.png         allocator peaks per epoch and sampled device memory (NVML used / RSS) over
//   time
#pragma once

#include <filesystem>

namespace training {

// Writes the report (atomically) and returns its path. Throws UserError when `run_dir` holds
// no run (no metrics.jsonl). Missing plots (no Python/matplotlib) are noted in the report.
std::filesystem::path write_report(const std::filesystem::path& run_dir);

}  // namespace training
