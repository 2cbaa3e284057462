#include "training/studies/sweep.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>

#include "models/resnet.h"
#include "training/cards/alloc_conf.h"
#include "training/cards/card_prediction.h"
#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/parts/setup.h"
#include "training/platform/atomic_file.h"
#include "training/platform/device.h"
#include "training/platform/dir_lock.h"
#include "training/platform/distributed.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/platform/stop_signal.h"
#include "training/run/output_dir.h"
#include "training/run/run_dir.h"
#include "training/step/graphed_step.h"
#include "training/studies/sweep_report.h"
#include "training/studies/sweep_runner.h"
#include "training/studies/sweep_slurm.h"
#include "training/studies/trial_pool.h"

namespace training {

namespace fs = std::filesystem;

namespace {

// Unwinds the sweep when a stop signal arrived (the running trial was stopped with it).
struct SweepStopped {};
// Unwinds the sweep when sweep.time_budget is spent (no new trial starts).
struct BudgetSpent {};

// The sweep itself, from its config.
int sweep(const SweepRequest& request, const Config& config) {
  set_cpu_threads(config.training.threads);
  const torch::Device device = training_device(config);
  check_sweep(config, device);
  std::optional<CardPredictor> predictor;
  if (!request.card.empty()) {
    predictor.emplace(config, find_card(request.card), alloc_conf_from_environment());
  }
  const OutputFolder out =
      output_folder(request.output_dir, config, "sweep-" + arch_name(config.model), true);
  const fs::path& dir = out.path;
  const bool slurm = config.sweep.launcher == SweepLauncher::Slurm;
  if (slurm) {  // before the folder exists
    check_slurm(config.sweep.slurm.options, static_cast<int64_t>(grid_cells(config.sweep).size() *
                                                                 config.sweep.batch_sizes.size()));
  }
  // A Slurm sweep run again on its folder keeps the trials measured (their results).
  const auto lock =
      claim_output_dir(dir, OutputKind::Sweep, out.named_by,
                       slurm ? std::vector<std::string>{"trials"} : std::vector<std::string>{});
  std::error_code ec;
  fs::create_directories(dir / "trials", ec);
  if (ec) throw UserError(dir.string() + ": cannot create the sweep directory: " + ec.message());
  write_file_atomically(dir / "config.yaml", to_yaml(config));
  install_stop_handlers();
  SweepRunner sweep(config, dir, request.executable, device, predictor ? &*predictor : nullptr);
  if (!(slurm ? sweep.run_on_slurm() : sweep.run())) return kExitStopped;
  // Trials whose task ended without a result: the folder stays unfinished, to be run again.
  if (sweep.failed_tasks() > 0) return stop_requested() ? kExitStopped : kExitTrialsFailed;
  mark_finished(dir, OutputKind::Sweep);
  return stop_requested() ? kExitStopped : kExitOk;  // a stop while the plots were drawn
}

}  // namespace

std::vector<Setting> grid_cells(const SweepConfig& sweep) {
  std::vector<Setting> settings;
  for (auto precision : sweep.precisions) {
    for (auto checkpointing : sweep.checkpointing) {
      for (auto format : sweep.memory_formats) {
        for (int64_t n : sweep.accumulate_steps) {
          settings.push_back({precision, checkpointing, format, n});
        }
      }
    }
  }
  return settings;
}

SweepRunner::SweepRunner(Config config, fs::path dir, fs::path executable, torch::Device device,
                         CardPredictor* predictor)
    : predictor_(predictor),
      config_(std::move(config)),
      dir_(std::move(dir)),
      executable_(std::move(executable)),
      device_(device),
      limit_(config_.memory.limit > 0 ? config_.memory.limit : total_memory(device_)),
      cells_(grid_cells(config_.sweep)) {
  // A trial on one GPU of sweep.devices sees that GPU alone, as its cuda:0.
  if (!config_.sweep.devices.empty()) config_.training.device = "cuda";
}

bool SweepRunner::run() {
  spdlog::info(
      "sweep: {} setting(s) x {} batch size(s) on {}, memory {} ({}), {} warm-up + {} "
      "measured steps per trial, each trial in its own process",
      cells_.size(), config_.sweep.batch_sizes.size(), describe_device(device_),
      format_bytes(limit_), config_.memory.limit > 0 ? "memory.limit" : "device",
      config_.sweep.warmup_steps, config_.sweep.measure_steps);
  if (!config_.sweep.devices.empty()) {
    spdlog::info("sweep: one trial at a time on each of GPUs {} (CUDA_VISIBLE_DEVICES)",
                 fmt::join(config_.sweep.devices, ", "));
  }
  // Without sweep.devices: one trial at a time, on training.device (-1: no GPU set).
  const std::vector<int64_t> gpus =
      config_.sweep.devices.empty() ? std::vector<int64_t>{-1} : config_.sweep.devices;
  try {
    const auto grid = grid_trials();
    run_on_devices(gpus, grid.size(), [&](size_t job, int64_t gpu) {
      trial_in_child_process(grid[job].first, grid[job].second, "grid", gpu);
    });
    if (config_.sweep.find_max) {
      run_on_devices(gpus, cells_.size(),
                     [&](size_t job, int64_t gpu) { find_max(cells_[job], gpu); });
    }
  } catch (const BudgetSpent&) {
    spdlog::warn("sweep.time_budget: {} s spent after {} trial(s); no further trial was started",
                 config_.sweep.time_budget, trials_.size());
    budget_spent_ = true;
  } catch (const SweepStopped&) {
    write_tables(/*complete=*/false,
                 fmt::format("stopped by a signal after {} trial(s); the same sweep run again "
                             "on this folder starts it afresh",
                             trials_.size()));
    plot_sweep(dir_, /*complete=*/false);
    spdlog::warn("sweep stopped by signal after {} trial(s); what was measured is in {}",
                 trials_.size(), dir_.string());
    return false;
  }
  const bool complete = !budget_spent_ && !search_failed_;
  write_tables(complete, budget_spent_ ? "sweep.time_budget was spent before its last trial"
                                       : "a find-max search ended on a trial that failed twice");
  finish(complete);
  return true;
}

TrialResult SweepRunner::trial_in_child_process(const Setting& setting, int64_t batch,
                                                const std::string& source, int64_t gpu,
                                                bool again) {
  SweepTrial trial{0, setting, batch, source, {}, 0, {}, {}};
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& done : trials_) {
      if (!again && done.setting == setting && done.batch == batch) return done.result;
    }
    const auto budget = std::chrono::seconds(config_.sweep.time_budget);
    if (budget.count() > 0 && std::chrono::steady_clock::now() - start_ >= budget) {
      throw BudgetSpent{};
    }
    trial.id = next_id_++;
  }
  prepare_trial(trial);
  const fs::path stem = dir_ / "trials" / fmt::format("{:03d}", trial.id);
  const fs::path yaml = stem.string() + ".yaml", result = stem.string() + ".json",
                 log = stem.string() + ".log";
  if (stop_requested()) throw SweepStopped{};
  test_stop_point(fmt::format("sweep trial {}", trial.id));  // tests: a stop as the trial starts
  const auto outcome = run_process(
      {executable_.string(), "sweep-trial", "--config", yaml.string(), "--result", result.string()},
      log, config_.sweep.trial_timeout,
      gpu >= 0 ? one_gpu_environment(gpu) : std::vector<std::string>{});
  // A stopped trial measured nothing, however the stop reached it (from a terminal to the whole
  // process group, the trial may end before this process has seen its own signal).
  if (outcome.stopped || stop_requested() || outcome.ended_by_stop()) throw SweepStopped{};
  trial.wall_seconds = outcome.seconds;
  trial.result = read_result(result, outcome, log);
  const std::lock_guard<std::mutex> lock(mutex_);
  const bool predicted = predict_on_card(trial);
  log_trial(trial);
  trials_.push_back(trial);
  if (!predicted) throw SweepStopped{};  // a stop during the card's recordings: its row is kept
  // What is measured is kept if the sweep dies, or a second stop ends it at once (its signal
  // handler writes nothing).
  write_tables(/*complete=*/false,
               "the sweep is running, or it ended before it finished (killed, or ended at once by "
               "a second stop)");
  return trial.result;
}

std::optional<TrialResult> SweepRunner::read_result_file(const fs::path& file) {
  try {
    std::ifstream in(file);
    if (in) return trial_from_json(nlohmann::json::parse(in));
  } catch (const std::exception&) {
    // an unreadable result is an error like a crash
  }
  return std::nullopt;
}

TrialResult SweepRunner::read_result(const fs::path& file, const ProcessOutcome& outcome,
                                     const fs::path& log) {
  if (!outcome.timed_out && outcome.signal == 0) {
    if (auto result = read_result_file(file)) return *result;
  }
  TrialResult crashed;
  crashed.status = TrialStatus::Error;
  const std::string last = last_line(log);
  crashed.message = "trial process " + outcome.describe() + (last.empty() ? "" : ": " + last);
  return crashed;
}

// Doubling from the largest batch known to fit, then binary search up to the smallest that does
// not, never below the smallest batch that trains (smallest_trainable_batch).
void SweepRunner::find_max(const Setting& setting, int64_t gpu) {
  int64_t fits = 0, fails = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (const auto& t : trials_) {
    if (!(t.setting == setting)) continue;
    if (t.result.status == TrialStatus::Ok) fits = std::max(fits, t.batch);
    if (t.result.status == TrialStatus::OutOfMemory) {
      fails = fails == 0 ? t.batch : std::min(fails, t.batch);
    }
  }
  lock.unlock();
  if (fails != 0 && fails < fits) fails = 0;  // inconsistent points: search afresh above
  // Below the smallest batch that trains nothing is probed: as if the batch under it fitted.
  fits =
      std::max(fits, models::smallest_trainable_batch(config_.model, config_.data.image_size) - 1);
  const int64_t cap = config_.sweep.max_batch;
  // Measures `batch` and moves the bound it decides. A trial that failed for another reason than
  // memory is tried once more; failing again, it ends the search, the sweep not complete.
  auto probe = [&](int64_t batch) {
    TrialResult result = trial_in_child_process(setting, batch, "find-max", gpu);
    if (result.status == TrialStatus::Error) {
      spdlog::warn("{}: batch {} failed ({}); trying it once more", setting.name(), batch,
                   result.message);
      result = trial_in_child_process(setting, batch, "find-max", gpu, /*again=*/true);
    }
    if (result.status == TrialStatus::Ok) fits = batch;
    if (result.status == TrialStatus::OutOfMemory) fails = batch;
    if (result.status == TrialStatus::Error) {
      spdlog::warn(
          "{}: find-max stopped: batch {} failed twice ({}); its largest batch that fits is not "
          "known, and sweep.json says complete: false",
          setting.name(), batch, result.message);
      search_failed_ = true;
    }
    return result.status != TrialStatus::Error;
  };
  while (fails == 0 && fits < cap) {
    if (!probe(std::min(cap, std::max<int64_t>(1, fits * 2)))) return;
  }
  while (fails != 0 && fails - fits > 1) {
    if (!probe(fits + (fails - fits) / 2)) return;
  }
}

int run_sweep(const SweepRequest& request) {
  const Config config = load_config(request.config_path, request.overrides);
  return with_key_origins(config, [&] { return sweep(request, config); });
}

}  // namespace training
