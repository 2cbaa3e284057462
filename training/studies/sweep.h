// `train sweep`: batch sizes x precision x checkpointing x memory format, each trial in its own
// child process (sweep_runner.h); optionally the largest batch that fits per cell (doubling, then
// binary search); a linear memory model per cell with predictions for other card sizes. The sweep
// folder holds config.yaml, trials/NNN.{yaml,json,log} and the tables and plots of sweep_report.h.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "training/cards/card_prediction.h"
#include "training/config/config.h"
#include "training/config/setting.h"
#include "training/studies/memory_model.h"
#include "training/studies/trial.h"

namespace training {

// The flags that make `train` take `cell` at `batch` as a trial measured it: precision, layout
// (never auto, which could choose the other and not fit), checkpointing and accumulation, and
// `memory_limit` (the sweep's emulated memory.limit; 0: none) as --memory-limit.
std::string run_flags(const Setting& cell, int64_t batch, int64_t memory_limit);

struct SweepTrial {
  int64_t id = 0;
  Setting setting;
  int64_t batch = 0;
  std::string source;  // grid | find-max
  TrialResult result;
  double wall_seconds = 0;  // the whole child process
  // With --card: the trial predicted on that card, or why it is not.
  std::optional<CardPrediction> on_card;
  std::string on_card_error;
};

struct SettingSummary {
  Setting setting;
  std::optional<int64_t> largest_fitting;   // largest batch measured ok
  std::optional<int64_t> smallest_failing;  // smallest batch measured oom
  bool searched = false;                    // find_max ran for this cell
  // find_max stopped at sweep.max_batch with no failing batch above: the largest that fits is at
  // least largest_fitting.
  bool max_batch_reached = false;
  int64_t max_batch = 0;
  std::optional<int64_t> fastest_batch;
  double fastest_images_per_second = 0;
  std::optional<MemoryFit> fit;  // of peak reserved bytes (= allocated on the CPU)
  std::vector<std::pair<int64_t, std::optional<int64_t>>> predictions;  // bytes -> max batch
};

// Summaries for each cell from its trials; predictions for `memory_sizes`, none below
// `smallest_batch` (smallest_trainable_batch). `max_batch`: where a search stops (0: none).
std::vector<SettingSummary> summarize(const std::vector<Setting>& cells,
                                      const std::vector<SweepTrial>& trials,
                                      const std::vector<int64_t>& memory_sizes, bool searched,
                                      int64_t smallest_batch = 1, int64_t max_batch = 0);

// A setting's largest batch that fits as the tables and the log say it: "108", "none", or where
// find-max stopped at sweep.max_batch "at least 64 (the search stops at sweep.max_batch, 64)".
std::string largest_fitting_text(const SettingSummary& summary);

struct SweepRequest {
  std::string config_path;
  std::vector<Override> overrides;   // --set and the sweep flags
  std::string output_dir;            // the sweep directory (default <output.dir>/sweep-...)
  std::filesystem::path executable;  // the `train` binary that runs each trial
  std::string card;  // --card: each trial also predicted on this card (card_prediction.h)
};

// Refuses, before anything is written, a sweep this device cannot run or whose keys clash.
void check_sweep(const Config& config, const torch::Device& device);

// Runs the whole sweep, its folder locked; kExitOk, kExitStopped when Ctrl-C/SIGTERM stopped it
// (the running trial or job array too; the outputs hold the trials done), or with slurm
// kExitTrialsFailed when tasks ended without a result. UserError/ConfigError for a bad grid or a
// folder that holds a run or a sweep, before any trial runs.
int run_sweep(const SweepRequest& request);

}  // namespace training
