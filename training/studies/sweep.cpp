#include "training/studies/sweep.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "training/cards/alloc_conf.h"
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
#include "training/studies/card_prediction.h"
#include "training/studies/sweep_report.h"

namespace training {

namespace fs = std::filesystem;

namespace {

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

// Unwinds the sweep when a stop signal arrived (the running trial was stopped with it).
struct SweepStopped {};
// Unwinds the sweep when sweep.time_budget is spent (no new trial starts).
struct BudgetSpent {};

// The parent side of a sweep: each trial runs in a child process (`train sweep-trial`, trial.h),
// so one that runs out of memory, crashes or hangs cannot affect the next.
class Sweep {
 public:
  Sweep(Config config, fs::path dir, fs::path executable, torch::Device device,
        CardPredictor* predictor)
      : predictor_(predictor),
        config_(std::move(config)),
        dir_(std::move(dir)),
        executable_(std::move(executable)),
        device_(device),
        limit_(config_.memory.limit > 0 ? config_.memory.limit : total_memory(device_)),
        cells_(grid_cells(config_.sweep)) {}

  // Runs the grid and the searches; false when a stop signal ended the sweep early (the outputs
  // then hold the trials completed so far).
  bool run() {
    spdlog::info(
        "sweep: {} setting(s) x {} batch size(s) on {}, memory {} ({}), {} warm-up + {} "
        "measured steps per trial, each trial in its own process",
        cells_.size(), config_.sweep.batch_sizes.size(), describe_device(device_),
        format_bytes(limit_), config_.memory.limit > 0 ? "memory.limit" : "device",
        config_.sweep.warmup_steps, config_.sweep.measure_steps);
    try {
      if (config_.sweep.time_budget > 0) {
        for (int64_t batch : config_.sweep.batch_sizes) {
          for (const auto& setting : cells_) trial_in_child_process(setting, batch, "grid");
        }
      } else {
        for (const auto& setting : cells_) {
          for (int64_t batch : config_.sweep.batch_sizes) {
            trial_in_child_process(setting, batch, "grid");
          }
        }
      }
      if (config_.sweep.find_max) {
        for (const auto& setting : cells_) find_max(setting);
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
    test_stop_point("sweep plots");
    plot_sweep(dir_, complete);
    for (const auto& summary : summaries()) log_summary(summary);
    spdlog::info("sweep written to {}", dir_.string());
    if (stop_requested()) {  // after the last trial: its caller exits as a stop
      spdlog::warn("sweep stopped by signal after its last trial; its tables are complete in {}",
                   dir_.string());
    }
    return true;
  }

 private:
  // Measures one trial in a child process (parent side); a batch already measured for this setting
  // is not measured twice.
  const TrialResult& trial_in_child_process(const Setting& setting, int64_t batch,
                                            const std::string& source, bool again = false) {
    for (const auto& done : trials_) {
      if (!again && done.setting == setting && done.batch == batch) return done.result;
    }
    const auto budget = std::chrono::seconds(config_.sweep.time_budget);
    if (budget.count() > 0 && std::chrono::steady_clock::now() - start_ >= budget) {
      throw BudgetSpent{};
    }
    SweepTrial trial{
        static_cast<int64_t>(trials_.size()) + 1, setting, batch, source, {}, 0, {}, {}};
    Config trial_config = config_;
    trial_config.training.batch_size = batch;
    setting.apply_to(trial_config);
    trial_config.checkpointing.blocks(std::nullopt);  // an auto trial chooses for its own batch
    const fs::path stem = dir_ / "trials" / fmt::format("{:03d}", trial.id);
    const fs::path yaml = stem.string() + ".yaml", result = stem.string() + ".json",
                   log = stem.string() + ".log";
    write_file_atomically(yaml, to_yaml(trial_config));
    // What is read back is what this trial writes: no earlier attempt's result or log.
    std::error_code ec;
    fs::remove(result, ec);
    fs::remove(log, ec);

    if (stop_requested()) throw SweepStopped{};
    test_stop_point(fmt::format("sweep trial {}", trial.id));  // tests: a stop as the trial starts
    const auto outcome = run_process({executable_.string(), "sweep-trial", "--config",
                                      yaml.string(), "--result", result.string()},
                                     log, config_.sweep.trial_timeout);
    // A stopped trial measured nothing, however the stop reached it (from a terminal to the whole
    // process group, the trial may end before this process has seen its own signal).
    if (outcome.stopped || stop_requested() || outcome.ended_by_stop()) throw SweepStopped{};
    trial.wall_seconds = outcome.seconds;
    trial.result = read_result(result, outcome, log);
    if (predictor_ && !setting.unpredictable().empty()) {
      trial.on_card_error = setting.unpredictable();
    } else if (predictor_) {
      try {  // a stream that cannot be scaled is said in the row, the sweep goes on
        trial.on_card = predictor_->predict(setting, batch);
      } catch (const std::runtime_error& e) {
        trial.on_card_error = error_line(e);
      }
    }
    const auto& r = trial.result;
    spdlog::info(
        "[{}] {} batch {}: {}{}", trial.id, setting.name(), batch, status_name(r.status),
        r.status == TrialStatus::Ok
            ? fmt::format(", peak {} MiB allocated / {} MiB reserved (after the "
                          "warm-up {} / {}), {:.4f} s/step, {:.0f} img/s",
                          mib_text(r.peak_allocated_bytes), mib_text(r.peak_reserved_bytes),
                          mib_text(r.steady_peak_allocated_bytes),
                          mib_text(r.steady_peak_reserved_bytes), r.median_step_seconds,
                          r.images_per_second)
            : ": " + r.message);
    trials_.push_back(trial);
    write_tables(/*complete=*/false,
                 "the sweep is running, or died");  // what is measured is kept if the sweep dies
    return trials_.back().result;
  }

  // The child's result file; a crash, a timeout or an unreadable file is an error result.
  static TrialResult read_result(const fs::path& file, const ProcessOutcome& outcome,
                                 const fs::path& log) {
    if (!outcome.timed_out && outcome.signal == 0 && fs::exists(file)) {
      try {
        std::ifstream in(file);
        return trial_from_json(nlohmann::json::parse(in));
      } catch (const std::exception&) {
        // fall through: an unreadable result is an error like a crash
      }
    }
    TrialResult crashed;
    crashed.status = TrialStatus::Error;
    const std::string last = last_line(log);
    crashed.message = "trial process " + outcome.describe() + (last.empty() ? "" : ": " + last);
    return crashed;
  }

  // Doubling from the largest batch known to fit, then binary search between the largest that
  // fits and the smallest that does not.
  void find_max(const Setting& setting) {
    int64_t fits = 0, fails = 0;
    for (const auto& t : trials_) {
      if (!(t.setting == setting)) continue;
      if (t.result.status == TrialStatus::Ok) fits = std::max(fits, t.batch);
      if (t.result.status == TrialStatus::OutOfMemory) {
        fails = fails == 0 ? t.batch : std::min(fails, t.batch);
      }
    }
    if (fails != 0 && fails < fits) fails = 0;  // inconsistent points: search afresh above
    const int64_t cap = config_.sweep.max_batch;
    // Measures `batch` and moves the bound it decides. A trial that failed for another reason
    // than memory is tried once more; failing again, it ends this setting's search, and the sweep
    // is not complete: its largest batch is not known (a smaller one is no answer).
    auto probe = [&](int64_t batch) {
      const TrialResult* r = &trial_in_child_process(setting, batch, "find-max");
      if (r->status == TrialStatus::Error) {
        spdlog::warn("{}: batch {} failed ({}); trying it once more", setting.name(), batch,
                     r->message);
        r = &trial_in_child_process(setting, batch, "find-max", /*again=*/true);
      }
      if (r->status == TrialStatus::Ok) fits = batch;
      if (r->status == TrialStatus::OutOfMemory) fails = batch;
      if (r->status == TrialStatus::Error) {
        spdlog::warn(
            "{}: find-max stopped: batch {} failed twice ({}); its largest batch that fits is not "
            "known, and sweep.json says complete: false",
            setting.name(), batch, r->message);
        search_failed_ = true;
      }
      return r->status != TrialStatus::Error;
    };
    while (fails == 0 && fits < cap) {
      if (!probe(std::min(cap, std::max<int64_t>(1, fits * 2)))) return;
    }
    while (fails != 0 && fails - fits > 1) {
      if (!probe(fits + (fails - fits) / 2)) return;
    }
  }

  std::vector<int64_t> memory_sizes() const {
    std::vector<int64_t> sizes = {limit_};
    for (int64_t size : config_.sweep.predict_for) sizes.push_back(size);
    return sizes;
  }

  std::vector<SettingSummary> summaries() const {
    return summarize(cells_, trials_, memory_sizes(), config_.sweep.find_max);
  }

  void write_tables(bool complete, const std::string& why_incomplete) const {
    const SweepFacts facts{arch_name(config_.model),
                           stem_name(config_.model),
                           device_.str(),
                           describe_device(device_),
                           limit_,
                           config_.memory.limit > 0,
                           config_.sweep.warmup_steps,
                           config_.sweep.measure_steps,
                           memory_sizes(),
                           config_.training.eval_batch_size,
                           train_images_at_most(config_.data),
                           config_.sweep.data_parallel ? config_.distributed.bucket_mb : 0,
                           config_.data.image_size};
    write_sweep_tables(dir_, facts, summaries(), trials_, complete, why_incomplete);
  }

  void log_summary(const SettingSummary& summary) const {
    spdlog::info(
        "{}: largest batch that fits {}, fastest batch {}{}{}", summary.setting.name(),
        summary.largest_fitting ? std::to_string(*summary.largest_fitting) : "none",
        summary.fastest_batch ? fmt::format("{} ({:.0f} img/s)", *summary.fastest_batch,
                                            summary.fastest_images_per_second)
                              : std::string("none"),
        summary.fit ? fmt::format(", peak = {} MiB + {:.2f} MiB x batch (R² {:.4f})",
                                  mib_text(static_cast<int64_t>(summary.fit->intercept)),
                                  summary.fit->slope / kMiB, summary.fit->r_squared)
                    : std::string(),
        !summary.largest_fitting ? std::string()
        : untrainable(*summary.largest_fitting).empty()
            ? "; train it as measured: " +
                  run_flags(summary.setting, *summary.largest_fitting, config_.memory.limit)
            : "; " + untrainable(*summary.largest_fitting));
  }
  std::string untrainable(int64_t batch) const {
    return untrainable_batch(batch, train_images_at_most(config_.data));
  }

  CardPredictor* predictor_;  // null without --card
  Config config_;
  fs::path dir_;
  fs::path executable_;
  torch::Device device_;
  int64_t limit_;
  std::vector<Setting> cells_;
  std::vector<SweepTrial> trials_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool budget_spent_ = false;
  bool search_failed_ = false;  // a find-max search ended on a trial that failed twice
};

}  // namespace

std::vector<SettingSummary> summarize(const std::vector<Setting>& settings,
                                      const std::vector<SweepTrial>& trials,
                                      const std::vector<int64_t>& memory_sizes, bool searched) {
  std::vector<SettingSummary> summaries;
  for (const auto& setting : settings) {
    SettingSummary s;
    s.setting = setting;
    s.searched = searched;
    std::vector<int64_t> batches, peaks;
    for (const auto& t : trials) {
      if (!(t.setting == setting)) continue;
      if (t.result.status == TrialStatus::Ok) {
        s.largest_fitting = std::max(s.largest_fitting.value_or(0), t.batch);
        batches.push_back(t.batch);
        peaks.push_back(t.result.peak_reserved_bytes);
        if (t.result.images_per_second > s.fastest_images_per_second) {
          s.fastest_images_per_second = t.result.images_per_second;
          s.fastest_batch = t.batch;
        }
      } else if (t.result.status == TrialStatus::OutOfMemory) {
        s.smallest_failing = std::min(s.smallest_failing.value_or(t.batch), t.batch);
      }
    }
    // An auto setting's peak is held under its budget by recomputing more at larger batches: no
    // line fits it, and no prediction is made from one.
    if (setting.checkpointing != CheckpointMode::Auto) s.fit = fit_memory(batches, peaks);
    for (int64_t size : memory_sizes) {
      s.predictions.emplace_back(size, s.fit ? s.fit->max_batch(size) : std::nullopt);
    }
    summaries.push_back(s);
  }
  return summaries;
}

namespace {

// The sweep itself, from its config.
int sweep(const SweepRequest& request, const Config& config) {
  set_cpu_threads(config.training.threads);
  const torch::Device device = training_device(config);
  check_sweep(config, device);
  std::optional<CardPredictor> predictor;
  if (!request.card.empty()) {
    predictor.emplace(config, find_card(request.card), alloc_conf_from_environment());
  }
  const fs::path dir =
      !request.output_dir.empty()
          ? fs::path(request.output_dir)
          : new_run_path(config.output.dir, config.output.name, "sweep-" + arch_name(config.model));
  const auto lock = claim_output_dir(dir, OutputKind::Sweep, "--output-dir");
  std::error_code ec;
  fs::create_directories(dir / "trials", ec);
  if (ec) throw UserError(dir.string() + ": cannot create the sweep directory: " + ec.message());
  write_file_atomically(dir / "config.yaml", to_yaml(config));
  install_stop_handlers();
  if (!Sweep(config, dir, request.executable, device, predictor ? &*predictor : nullptr).run()) {
    return kExitStopped;
  }
  mark_finished(dir, OutputKind::Sweep);
  return stop_requested() ? kExitStopped : kExitOk;  // a stop while the plots were drawn
}

}  // namespace

int run_sweep(const SweepRequest& request) {
  const Config config = load_config(request.config_path, request.overrides);
  return with_key_origins(config, [&] { return sweep(request, config); });
}

}  // namespace training
