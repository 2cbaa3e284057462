// A sweep's outputs, written from its trials and their per-setting summaries:
//
//   <sweep>/sweep.csv       one row per trial
//   <sweep>/sweep.json      the sweep's facts, per-setting summaries (fits, predictions), trials
//   <sweep>/sweep.md        the same as readable tables
//   <sweep>/peak_memory.png, throughput.png   (scripts/plot_sweep.py)
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "training/studies/sweep.h"

namespace training {

// What a sweep measured on, for the outputs' headers.
struct SweepFacts {
  std::string arch, stem;
  std::string device, device_description;
  int64_t memory_limit_bytes = 0;  // the device's memory, or memory.limit
  bool limit_is_emulated = false;
  int64_t warmup_steps = 0, measure_steps = 0;
  std::vector<int64_t> memory_sizes;      // the limit, then --predict-for's sizes
  int64_t eval_batch_size = 0;            // training.eval_batch_size of the swept config
  int64_t train_images = 0;               // its training set's size at most (0: not known)
  int64_t data_parallel_bucket_mb = 0;    // sweep.data_parallel: the reducer's bucket size; 0 = off
  int64_t image_size = kStoredImageSize;  // data.image_size
  std::string card{};                     // --card: the card's name as train names it; "" none
};

// Writes sweep.json, sweep.csv and sweep.md (each atomically); not `complete`, sweep.md says
// `why_incomplete` ("stopped by a signal after 2 trials").
void write_sweep_tables(const std::filesystem::path& dir, const SweepFacts& facts,
                        const std::vector<SettingSummary>& cells,
                        const std::vector<SweepTrial>& trials, bool complete,
                        const std::string& why_incomplete = "");

// A sweep read back from its sweep.json (what `train plan` plans from).
struct SweepRecord {
  std::string arch, stem, device;
  int64_t image_size = kStoredImageSize;  // data.image_size it measured at
  bool cuda = false;                      // the device is a CUDA device
  bool complete = false;
  std::vector<Setting> cells;
  std::vector<SweepTrial> trials;
};
// UserError naming `dir` when it holds no sweep.json, or the file when it is not one.
SweepRecord read_sweep(const std::filesystem::path& dir);

// Draws peak_memory.png and throughput.png; a problem (no matplotlib, a stop) is logged, not
// thrown.
void plot_sweep(const std::filesystem::path& dir, bool complete);

}  // namespace training
