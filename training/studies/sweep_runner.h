// The parent side of `train sweep`: the grid's trials in child processes (`train sweep-trial`),
// one at a time, one per GPU of sweep.devices, or as one Slurm job array; then the tables.
// sweep.cpp holds the local launcher, sweep_runner.cpp the Slurm one, the trials' files and tables.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "training/cards/card_prediction.h"
#include "training/config/config.h"
#include "training/platform/process.h"
#include "training/studies/sweep.h"

namespace training {

struct SlurmOutcome;

// The sweep's cells: precisions x checkpointing x memory formats x accumulation.
std::vector<Setting> grid_cells(const SweepConfig& sweep);

class SweepRunner {
 public:
  SweepRunner(Config config, std::filesystem::path dir, std::filesystem::path executable,
              torch::Device device, CardPredictor* predictor);

  // Runs the grid and the searches; false when a stop signal ended the sweep early (the outputs
  // then hold the trials completed so far).
  bool run();
  // sweep.launcher: slurm -- the grid as one job array, less the trials whose result is kept
  // (prepare_trial); the files of trials no longer in the grid removed. False when a stop cancelled
  // the array before every trial had its result; failed_tasks() counts those without one.
  bool run_on_slurm();
  int64_t failed_tasks() const { return failed_tasks_; }

 private:
  void finish(bool complete);
  // The grid's trials in the order they start: setting by setting, or with sweep.time_budget
  // batch by batch across the settings (every setting gets its small batches first).
  std::vector<std::pair<Setting, int64_t>> grid_trials() const;
  // Writes trials/NNN.yaml and removes an earlier attempt's result and log. With `keep_result`, a
  // result (ok or oom) of a trial config that measures the same is kept instead and true returned
  // (one not kept says why; one holding a value no trial writes is a UserError naming the file).
  bool prepare_trial(const SweepTrial& trial, bool keep_result = false) const;
  // Why the result in `result` is not the measurement `measured` asks for; "" when it is.
  static std::string why_not_kept(const std::filesystem::path& yaml,
                                  const std::filesystem::path& result, const std::string& measured);
  bool slurm_row(SweepTrial& trial, const SlurmOutcome& outcome, bool submitted) const;
  // slurm: removes trials/NNN.* of trials above this grid's `trials` (an earlier, larger grid).
  void remove_trials_not_in_grid(int64_t trials) const;
  // Measures one trial in a child process, on GPU `gpu` alone (-1: none set), never a batch twice;
  // with sweep.devices several run at once, sharing the trials and tables under mutex_.
  TrialResult trial_in_child_process(const Setting& setting, int64_t batch,
                                     const std::string& source, int64_t gpu, bool again = false);
  // With --card: the trial's prediction, or why there is none, into its row, and the setting's
  // largest batch (CardPredictor::largest_batch) into every earlier row of it. False when a stop
  // came before one of the card's recordings: the sweep stops. Under mutex_.
  bool predict_on_card(SweepTrial& trial);
  static void log_trial(const SweepTrial& trial);
  // The child's result file; nullopt when it is missing or unreadable.
  static std::optional<TrialResult> read_result_file(const std::filesystem::path& file);
  // The trial's result; a crash, a timeout or an unreadable file is an error result.
  static TrialResult read_result(const std::filesystem::path& file, const ProcessOutcome& outcome,
                                 const std::filesystem::path& log);
  void find_max(const Setting& setting, int64_t gpu);
  std::vector<int64_t> memory_sizes() const;
  std::vector<SettingSummary> summaries() const;
  void write_tables(bool complete, const std::string& why_incomplete) const;
  void log_summary(const SettingSummary& summary) const;

  CardPredictor* predictor_;  // null without --card
  Config config_;
  std::filesystem::path dir_;
  std::filesystem::path executable_;
  torch::Device device_;
  int64_t limit_;
  std::vector<Setting> cells_;
  std::vector<SweepTrial> trials_;
  std::mutex mutex_;  // trials_, next_id_ and the tables, shared by the trials of sweep.devices
  int64_t next_id_ = 1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool budget_spent_ = false;
  std::atomic<bool> search_failed_{false};  // a find-max search ended on a trial failing twice
  int64_t failed_tasks_ = 0;                // slurm: trials whose task ended without a result
};

}  // namespace training
