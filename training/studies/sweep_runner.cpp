#include "training/studies/sweep_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

#include "models/resnet.h"
#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"
#include "training/platform/json_rows.h"
#include "training/platform/memory.h"
#include "training/platform/statistics.h"
#include "training/platform/stop_signal.h"
#include "training/studies/sweep_report.h"
#include "training/studies/sweep_slurm.h"

namespace training {

namespace fs = std::filesystem;

namespace {

// What of a trial's config decides its measurement: the config less the output folder and the
// sweep's keys but sweep.warmup_steps, sweep.measure_steps and sweep.data_parallel.
std::string measured_part(const Config& config) {
  Config c = config;
  SweepConfig kept;
  kept.warmup_steps = c.sweep.warmup_steps;
  kept.measure_steps = c.sweep.measure_steps;
  kept.data_parallel = c.sweep.data_parallel;
  c.sweep = kept;
  c.output = OutputConfig{};
  return to_yaml(c);
}

// The first line of `now` that differs from `before`, with its section: "training: batch_size:
// 16 (was 8)".
std::string first_difference(const std::string& before, const std::string& now) {
  std::istringstream a(before), b(now);
  std::string was, is, section;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, was));
    const bool more_b = static_cast<bool>(std::getline(b, is));
    if (!more_a && !more_b) return "";
    if (!more_b) is.clear();
    if (!more_a) was.clear();
    const auto trim = [](const std::string& t) {
      const auto start = t.find_first_not_of(' ');
      return start == std::string::npos ? std::string() : t.substr(start);
    };
    if (was != is) {
      const std::string where = is.rfind(' ', 0) == 0 && !section.empty() ? section + " " : "";
      return where + trim(is) + " (was " + trim(was) + ")";
    }
    if (!is.empty() && is[0] != ' ') section = is;
  }
}

}  // namespace

bool SweepRunner::run_on_slurm() {
  const auto grid = grid_trials();
  remove_trials_not_in_grid(static_cast<int64_t>(grid.size()));
  std::vector<SweepTrial> trials;
  std::vector<int64_t> submit;
  for (const auto& [setting, batch] : grid) {
    trials.push_back({next_id_++, setting, batch, "grid", {}, 0, {}, {}});
    if (!prepare_trial(trials.back(), /*keep_result=*/true)) submit.push_back(trials.back().id);
  }
  spdlog::info("sweep: {} trial(s) as one Slurm job array, {} already measured in {}", grid.size(),
               grid.size() - submit.size(), dir_.string());
  SlurmOutcome outcome;
  if (!submit.empty()) {
    outcome = run_slurm_array(dir_, executable_, submit, config_.sweep.slurm.options);
  }
  bool unpredicted = false;  // a stop before one of the card's recordings (--card)
  for (auto& trial : trials) {
    const bool submitted = std::find(submit.begin(), submit.end(), trial.id) != submit.end();
    if (!slurm_row(trial, outcome, submitted)) ++failed_tasks_;
    if (!predict_on_card(trial)) unpredicted = true;
    log_trial(trial);
    trials_.push_back(trial);
  }
  // A stop after every task ended is no loss, unless it left out the card's predictions.
  const bool cancelled = outcome.stopped && failed_tasks_ > 0;
  if (cancelled || unpredicted) {
    const std::string how = cancelled ? fmt::format(": slurm job {} cancelled", outcome.job_id)
                                      : std::string(" during the card's predictions");
    write_tables(false, fmt::format("stopped by a signal{}; the same sweep run again on this "
                                    "folder submits only the trials without a result",
                                    how));
    plot_sweep(dir_, /*complete=*/false);
    spdlog::warn("sweep stopped by signal{}; what was measured is in {}", how, dir_.string());
    return false;
  }
  if (failed_tasks_ > 0) {
    spdlog::warn(
        "slurm job {}: {} trial(s) ended without a result (their rows say how); the "
        "same sweep run again on this folder submits only them",
        outcome.job_id, failed_tasks_);
  }
  write_tables(failed_tasks_ == 0, fmt::format("{} task(s) of slurm job {} ended without a result",
                                               failed_tasks_, outcome.job_id));
  finish(failed_tasks_ == 0);
  return true;
}

// The trial's row from its result, a submitted trial's only when its own array task wrote it
// (another array's is removed, said in the row); else the task's Slurm state. False when the trial
// has no result.
bool SweepRunner::slurm_row(SweepTrial& trial, const SlurmOutcome& outcome, bool submitted) const {
  const fs::path stem = dir_ / "trials" / fmt::format("{:03d}", trial.id);
  const fs::path json = stem.string() + ".json";
  auto measured = read_result_file(json);
  std::string why;
  if (measured && submitted && !is_task_result(*measured, outcome.job_id, trial.id)) {
    why = fmt::format("{} was written by slurm job {} task {}, not this array's task (removed)",
                      json.filename().string(), measured->job_id, measured->array_index);
    spdlog::warn("trial {}: {}", trial.id, why);
    std::error_code ec;
    fs::remove(json, ec);
    measured.reset();
  }
  const auto task = outcome.tasks.find(trial.id);
  const SlurmTask state = task == outcome.tasks.end() ? SlurmTask{} : task->second;
  if (measured) {
    trial.result = *measured;
    if (submitted) trial.wall_seconds = std::max(0.0, state.elapsed_seconds);
    return true;
  }
  trial.result = failed_task_result(state, outcome.job_id, trial.id, stem.string() + ".log", why);
  return false;
}

void SweepRunner::remove_trials_not_in_grid(int64_t trials) const {
  int64_t removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_ / "trials", ec)) {
    const std::string stem = entry.path().stem().string(), ext = entry.path().extension().string();
    if (stem.empty() || stem.find_first_not_of("0123456789") != std::string::npos ||
        stem.size() > 9 || (ext != ".yaml" && ext != ".json" && ext != ".log")) {
      continue;
    }
    const int64_t id = std::stoll(stem);
    if (id < 1 || id > trials) removed += fs::remove(entry.path(), ec) ? 1 : 0;
  }
  if (removed > 0) {
    spdlog::info("sweep: {} file(s) of trials no longer in the grid removed from {}", removed,
                 (dir_ / "trials").string());
  }
}

void SweepRunner::finish(bool complete) {
  test_stop_point("sweep plots");
  plot_sweep(dir_, complete);
  for (const auto& summary : summaries()) log_summary(summary);
  spdlog::info("sweep written to {}", dir_.string());
  if (stop_requested()) {  // after the last trial: its caller exits as a stop
    spdlog::warn("sweep stopped by signal after its last trial; its tables are complete in {}",
                 dir_.string());
  }
}

std::vector<std::pair<Setting, int64_t>> SweepRunner::grid_trials() const {
  std::vector<std::pair<Setting, int64_t>> grid;
  if (config_.sweep.time_budget > 0) {
    for (int64_t batch : config_.sweep.batch_sizes) {
      for (const auto& setting : cells_) grid.emplace_back(setting, batch);
    }
  } else {
    for (const auto& setting : cells_) {
      for (int64_t batch : config_.sweep.batch_sizes) grid.emplace_back(setting, batch);
    }
  }
  return grid;
}

bool SweepRunner::prepare_trial(const SweepTrial& trial, bool keep_result) const {
  Config trial_config = config_;
  trial_config.training.batch_size = trial.batch;
  trial.setting.apply_to(trial_config);
  trial_config.checkpointing.blocks(std::nullopt);  // an auto trial chooses for its own batch
  const fs::path stem = dir_ / "trials" / fmt::format("{:03d}", trial.id);
  const fs::path yaml = stem.string() + ".yaml", result = stem.string() + ".json",
                 log = stem.string() + ".log";
  const std::string text = to_yaml(trial_config);
  if (keep_result && fs::exists(result)) {
    const std::string why = why_not_kept(yaml, result, measured_part(trial_config));
    if (why.empty()) return true;
    spdlog::info("trial {}: its result in {} is measured again: {}", trial.id, result.string(),
                 why);
  }
  write_file_atomically(yaml, text);
  std::error_code ec;
  fs::remove(result, ec);
  fs::remove(log, ec);
  return false;
}

std::string SweepRunner::why_not_kept(const fs::path& yaml, const fs::path& result,
                                      const std::string& measured) {
  TrialResult kept;
  try {
    std::ifstream in(result);
    kept = trial_from_json(nlohmann::json::parse(in));
  } catch (const std::out_of_range& e) {  // read_at_least: a value the trial never writes
    throw UserError(result.string() + ": " + first_line(e.what()) +
                    " (train sweep-trial never writes it: edited or damaged; remove the file to "
                    "measure the trial again)");
  } catch (const std::exception& e) {
    return "it is unreadable (" + json_error_text(e) + ")";
  }
  if (kept.status == TrialStatus::Error) return "it is an error";
  std::string before;
  try {
    std::ifstream in(yaml);
    before = measured_part(parse_config(std::string(std::istreambuf_iterator<char>(in), {}),
                                        yaml.string(), {}, ConfigRead::Record));
  } catch (const std::exception& e) {
    return "its config " + yaml.string() + " is unreadable (" + first_line(e.what()) + ")";
  }
  if (before == measured) return "";
  return "its trial config differs: " + first_difference(before, measured);
}

bool SweepRunner::predict_on_card(SweepTrial& trial) {
  if (predictor_ && !trial.setting.unpredictable().empty()) {
    trial.on_card_error = trial.setting.unpredictable(/*sweep=*/true);
  } else if (predictor_) {
    try {  // a stream that cannot be scaled is said in the row, the sweep goes on
      trial.on_card = predictor_->predict(trial.setting, trial.batch);
    } catch (const RecordingStopped& e) {  // said in the row too, and the sweep stops
      trial.on_card_error = e.what();
      return false;
    } catch (const std::runtime_error& e) {
      trial.on_card_error = error_line(e);
    }
    for (auto& earlier : trials_) {
      const auto largest = predictor_->largest_batch(earlier.setting);
      if (earlier.on_card && largest) earlier.on_card->largest_batch = *largest;
    }
  }
  return true;
}

void SweepRunner::log_trial(const SweepTrial& trial) {
  const auto& setting = trial.setting;
  const int64_t batch = trial.batch;
  const auto& r = trial.result;
  spdlog::info("[{}] {} batch {}: {}{}", trial.id, setting.name(), batch, status_name(r.status),
               r.status == TrialStatus::Ok
                   ? fmt::format(", peak {} MiB allocated / {} MiB reserved (after the "
                                 "warm-up {} / {}), {:.4f} s/step, {} img/s",
                                 mib_text(r.peak_allocated_bytes), mib_text(r.peak_reserved_bytes),
                                 mib_text(r.steady_peak_allocated_bytes.value_or(0)),
                                 mib_text(r.steady_peak_reserved_bytes.value_or(0)),
                                 r.median_step_seconds.value_or(0),
                                 rate_text(r.images_per_second.value_or(0)))
                   : ": " + r.message);
}

std::vector<int64_t> SweepRunner::memory_sizes() const {
  std::vector<int64_t> sizes = {limit_};
  for (int64_t size : config_.sweep.predict_for) sizes.push_back(size);
  return sizes;
}

std::vector<SettingSummary> SweepRunner::summaries() const {
  return summarize(cells_, trials_, memory_sizes(), config_.sweep.find_max,
                   models::smallest_trainable_batch(config_.model, config_.data.image_size),
                   config_.sweep.max_batch);
}

void SweepRunner::write_tables(bool complete, const std::string& why_incomplete) const {
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
                         config_.data.image_size,
                         predictor_ ? predictor_->card().name : ""};
  std::vector<SweepTrial> in_order = trials_;  // with sweep.devices they end out of order
  std::sort(in_order.begin(), in_order.end(),
            [](const SweepTrial& a, const SweepTrial& b) { return a.id < b.id; });
  write_sweep_tables(dir_, facts, summaries(), in_order, complete, why_incomplete);
}

void SweepRunner::log_summary(const SettingSummary& summary) const {
  const std::string refused =
      summary.largest_fitting
          ? untrainable_batch(*summary.largest_fitting, summary.setting.accumulate_steps,
                              train_images_at_most(config_.data))
          : "";
  spdlog::info("{}: largest batch that fits {}, fastest batch {}{}{}", summary.setting.name(),
               largest_fitting_text(summary),
               summary.fastest_batch ? fmt::format("{} ({} img/s)", *summary.fastest_batch,
                                                   rate_text(summary.fastest_images_per_second))
                                     : std::string("none"),
               summary.fit ? fmt::format(", peak = {} MiB + {:.3f} MiB x batch (R² {:.4f})",
                                         mib_text(static_cast<int64_t>(summary.fit->intercept)),
                                         summary.fit->slope / kMiB, summary.fit->r_squared)
                           : std::string(),
               !summary.largest_fitting ? std::string()
               : refused.empty()
                   ? "; train it as measured: " +
                         run_flags(summary.setting, *summary.largest_fitting, config_.memory.limit)
                   : "; " + refused);
}

std::vector<SettingSummary> summarize(const std::vector<Setting>& settings,
                                      const std::vector<SweepTrial>& trials,
                                      const std::vector<int64_t>& memory_sizes, bool searched,
                                      int64_t smallest_batch, int64_t max_batch) {
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
        if (t.result.images_per_second.value_or(0) > s.fastest_images_per_second) {
          s.fastest_images_per_second = t.result.images_per_second.value_or(0);
          s.fastest_batch = t.batch;
        }
      } else if (t.result.status == TrialStatus::OutOfMemory) {
        s.smallest_failing = std::min(s.smallest_failing.value_or(t.batch), t.batch);
      }
    }
    const bool failed_above = std::any_of(trials.begin(), trials.end(), [&](const auto& t) {
      return t.setting == setting && t.result.status == TrialStatus::OutOfMemory &&
             t.batch > s.largest_fitting.value_or(0);
    });
    s.max_batch = max_batch;
    s.max_batch_reached = searched && max_batch > 0 && s.largest_fitting &&
                          *s.largest_fitting >= max_batch && !failed_above;
    // An auto setting's peak is held under its budget by recomputing more at larger batches: no
    // line fits it, and no prediction is made from one.
    if (setting.checkpointing != CheckpointMode::Auto) s.fit = fit_memory(batches, peaks);
    for (int64_t size : memory_sizes) {
      std::optional<int64_t> largest = s.fit ? s.fit->max_batch(size) : std::nullopt;
      if (largest && *largest < smallest_batch) largest = 0;  // a batch that does not train
      s.predictions.emplace_back(size, largest);
    }
    summaries.push_back(s);
  }
  return summaries;
}

}  // namespace training
