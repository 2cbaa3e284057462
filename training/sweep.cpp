#include "training/sweep.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "training/atomic_file.h"
#include "training/device.h"
#include "training/errors.h"
#include "training/memory.h"
#include "training/process.h"
#include "training/run_dir.h"
#include "training/stop_signal.h"
#include "training/json_rows.h"

namespace training {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::string SweepCell::name() const {
  return std::string(precision_name(precision)) + " / checkpointing " +
         (checkpointing ? "on" : "off") + " / " + memory_format_name(memory_format);
}

namespace {

ordered_json cell_json(const SweepCell& cell) {
  return {{"precision", precision_name(cell.precision)},
          {"checkpointing", cell.checkpointing},
          {"memory_format", memory_format_name(cell.memory_format)}};
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f}", to_mib(bytes));
}

std::vector<SweepCell> grid_cells(const SweepConfig& sweep) {
  std::vector<SweepCell> cells;
  for (auto precision : sweep.precisions) {
    for (bool checkpointing : sweep.checkpointing) {
      for (auto format : sweep.memory_formats) cells.push_back({precision, checkpointing, format});
    }
  }
  return cells;
}

// Unwinds the sweep when a stop signal arrived (the running trial was stopped with it).
struct SweepStopped {};

class Sweep {
 public:
  Sweep(Config config, fs::path dir, fs::path executable, torch::Device device)
      : config_(std::move(config)),
        dir_(std::move(dir)),
        executable_(std::move(executable)),
        device_(device),
        limit_(config_.memory.limit > 0 ? config_.memory.limit : total_memory(device_)),
        cells_(grid_cells(config_.sweep)) {}

  // Runs the grid and the searches; false when a stop signal ended the sweep early (the outputs
  // then hold the trials completed so far).
  bool run() {
    spdlog::info(
        "sweep: {} cell(s) x {} batch size(s) on {}, memory {} ({}), {} warm-up + {} "
        "measured steps per trial, each trial in its own process",
        cells_.size(), config_.sweep.batch_sizes.size(), describe_device(device_),
        format_bytes(limit_), config_.memory.limit > 0 ? "memory.limit" : "device",
        config_.sweep.warmup_steps, config_.sweep.measure_steps);
    try {
      for (const auto& cell : cells_) {
        for (int64_t batch : config_.sweep.batch_sizes) run_trial(cell, batch, "grid");
      }
      if (config_.sweep.find_max) {
        for (const auto& cell : cells_) find_max(cell);
      }
    } catch (const SweepStopped&) {
      write_outputs(/*complete=*/false);
      plot();
      spdlog::warn("sweep stopped by signal after {} trial(s); what was measured is in {}",
                   trials_.size(), dir_.string());
      return false;
    }
    write_outputs(/*complete=*/true);
    plot();
    for (const auto& summary : summaries()) {
      spdlog::info("{}: largest batch that fits {}, fastest batch {} ({:.0f} img/s){}",
                   summary.cell.name(),
                   summary.largest_fitting ? std::to_string(*summary.largest_fitting) : "none",
                   summary.fastest_batch ? std::to_string(*summary.fastest_batch) : "none",
                   summary.fastest_images_per_second,
                   summary.fit ? fmt::format(", peak = {} MiB + {} MiB x batch (R² {:.4f})",
                                             mib(static_cast<int64_t>(summary.fit->intercept)),
                                             fmt::format("{:.2f}", summary.fit->slope / (1 << 20)),
                                             summary.fit->r_squared)
                               : std::string());
    }
    spdlog::info("sweep written to {}", dir_.string());
    return true;
  }

 private:
  const TrialResult& run_trial(const SweepCell& cell, int64_t batch, const std::string& source) {
    // A batch already measured for this cell is not measured twice.
    for (const auto& done : trials_) {
      if (done.cell == cell && done.batch == batch) return done.result;
    }
    SweepTrial trial;
    trial.id = static_cast<int64_t>(trials_.size()) + 1;
    trial.cell = cell;
    trial.batch = batch;
    trial.source = source;

    Config trial_config = config_;
    trial_config.training.batch_size = batch;
    trial_config.training.precision = cell.precision;
    trial_config.training.memory_format = cell.memory_format;
    trial_config.checkpointing.enabled(cell.checkpointing);
    const fs::path stem = dir_ / "trials" / fmt::format("{:03d}", trial.id);
    const fs::path yaml = stem.string() + ".yaml", result = stem.string() + ".json",
                   log = stem.string() + ".log";
    write_file_atomically(yaml, to_yaml(trial_config));

    if (stop_requested()) throw SweepStopped{};
    const auto outcome = run_process({executable_.string(), "sweep-trial", "--config",
                                      yaml.string(), "--result", result.string()},
                                     log, config_.sweep.trial_timeout);
    if (outcome.stopped) throw SweepStopped{};  // an interrupted trial measured nothing
    trial.wall_seconds = outcome.seconds;
    trial.result = read_result(result, outcome, log);
    const auto& r = trial.result;
    spdlog::info(
        "[{}] {} batch {}: {}{}", trial.id, cell.name(), batch, r.status,
        r.status == "ok"
            ? fmt::format(", peak {} MiB allocated / {} MiB reserved (after the "
                          "warm-up {} / {}), {:.4f} s/step, {:.0f} img/s",
                          mib(r.peak_allocated_bytes), mib(r.peak_reserved_bytes),
                          mib(r.steady_peak_allocated_bytes), mib(r.steady_peak_reserved_bytes),
                          r.median_step_seconds, r.images_per_second)
            : ": " + r.message);
    trials_.push_back(trial);
    write_outputs(/*complete=*/false);  // what is measured is kept, even if the sweep dies
    return trials_.back().result;
  }

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
    crashed.status = "error";
    const std::string last = last_line(log);
    crashed.message = "trial process " + outcome.describe() + (last.empty() ? "" : ": " + last);
    return crashed;
  }

  // Doubling from the largest batch known to fit, then binary search between the largest that
  // fits and the smallest that does not.
  void find_max(const SweepCell& cell) {
    int64_t fits = 0, fails = 0;
    for (const auto& t : trials_) {
      if (!(t.cell == cell)) continue;
      if (t.result.status == "ok") fits = std::max(fits, t.batch);
      if (t.result.status == "oom") fails = fails == 0 ? t.batch : std::min(fails, t.batch);
    }
    if (fails != 0 && fails < fits) fails = 0;  // inconsistent points: search afresh above
    const int64_t cap = config_.sweep.max_batch;
    // Measures `batch` and moves the bound it decides; false when the trial failed for another
    // reason than memory, which ends the search for this cell.
    auto probe = [&](int64_t batch) {
      const auto& r = run_trial(cell, batch, "find-max");
      if (r.status == "ok") fits = batch;
      if (r.status == "oom") fails = batch;
      if (r.status == "error")
        spdlog::warn("{}: find-max stopped, a trial failed: {}", cell.name(), r.message);
      return r.status != "error";
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

  std::vector<CellSummary> summaries() const {
    return summarize(cells_, trials_, memory_sizes(), config_.sweep.find_max);
  }

  // The tables; `complete` is false until the sweep has finished.
  void write_outputs(bool complete) const {
    const auto cells = summaries();
    std::vector<ordered_json> rows;
    for (const auto& t : trials_) {
      ordered_json row = {{"trial", t.id}};
      row.update(cell_json(t.cell));
      row["batch_size"] = t.batch;
      row["source"] = t.source;
      row.update(to_json(t.result));
      row["wall_seconds"] = t.wall_seconds;
      rows.push_back(row);
    }
    ordered_json summary = ordered_json::array();
    for (const auto& c : cells) {
      ordered_json entry = cell_json(c.cell);
      entry["largest_fitting_batch"] = optional_json(c.largest_fitting);
      entry["smallest_failing_batch"] = optional_json(c.smallest_failing);
      entry["max_batch_searched"] = c.searched;
      entry["fastest_batch"] = optional_json(c.fastest_batch);
      entry["fastest_images_per_second"] = c.fastest_images_per_second;
      if (c.fit) {
        entry["fit"] = {{"intercept_bytes", c.fit->intercept},
                        {"bytes_per_sample", c.fit->slope},
                        {"r_squared", c.fit->r_squared},
                        {"points", c.fit->points}};
      } else {
        entry["fit"] = nullptr;
      }
      ordered_json predictions = ordered_json::array();
      for (const auto& [bytes, batch] : c.predictions) {
        predictions.push_back({{"memory_bytes", bytes}, {"max_batch", optional_json(batch)}});
      }
      entry["predictions"] = predictions;
      summary.push_back(entry);
    }
    ordered_json all = {{"arch", arch_name(config_.model)},
                        {"stem", stem_name(config_.model)},
                        {"device", device_.str()},
                        {"device_description", describe_device(device_)},
                        {"memory_limit_bytes", limit_},
                        {"limit_is_emulated", config_.memory.limit > 0},
                        {"warmup_steps", config_.sweep.warmup_steps},
                        {"measure_steps", config_.sweep.measure_steps},
                        {"complete", complete},
                        {"cells", summary},
                        {"trials", rows}};
    write_file_atomically(dir_ / "sweep.json", all.dump(2) + "\n");
    write_file_atomically(dir_ / "sweep.csv", rows_to_csv(rows));
    write_file_atomically(dir_ / "sweep.md", markdown(cells));
  }

  std::string markdown(const std::vector<CellSummary>& cells) const {
    std::ostringstream md;
    md << "# Batch-size sweep: " << arch_name(config_.model) << " (" << stem_name(config_.model)
       << " stem)\n\n"
       << "Device: " << describe_device(device_) << ". Memory: " << format_bytes(limit_)
       << (config_.memory.limit > 0 ? " (emulated with memory.limit)" : " (the device's)")
       << ". Each trial ran in its own process: " << config_.sweep.warmup_steps << " warm-up + "
       << config_.sweep.measure_steps
       << " measured steps on synthetic batches held on the device; step time is the median. "
          "Peaks include the first step (what must fit); the steady peak is over the measured "
          "steps after the warm-up.\n\n"
       << "## Trials\n\n"
       << "| # | precision | checkpointing | memory format | batch | status | peak allocated (MiB) "
          "| peak reserved (MiB) | steady peak reserved (MiB) | step (s) | images/s |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& t : trials_) {
      const auto& r = t.result;
      md << "| " << t.id << " | " << precision_name(t.cell.precision) << " | "
         << (t.cell.checkpointing ? "on" : "off") << " | "
         << memory_format_name(t.cell.memory_format) << " | " << t.batch << " | " << r.status
         << (r.status == "error" ? ": " + r.message : "") << " | " << mib(r.peak_allocated_bytes)
         << " | " << mib(r.peak_reserved_bytes) << " | " << mib(r.steady_peak_reserved_bytes)
         << " | " << (r.status == "ok" ? fmt::format("{:.4f}", r.median_step_seconds) : "-")
         << " | " << (r.status == "ok" ? fmt::format("{:.0f}", r.images_per_second) : "-")
         << " |\n";
    }
    md << "\n## Per setting\n\n"
       << "| setting | largest batch that fits | smallest batch that does not | fastest batch "
          "(images/s) | fit: peak = a + b x batch | R² |\n"
       << "|---|---|---|---|---|---|\n";
    for (const auto& c : cells) {
      md << "| " << c.cell.name() << " | "
         << (c.largest_fitting ? std::to_string(*c.largest_fitting) : "none")
         << (c.searched ? "" : " (grid only)") << " | "
         << (c.smallest_failing ? std::to_string(*c.smallest_failing) : "-") << " | "
         << (c.fastest_batch
                 ? fmt::format("{} ({:.0f})", *c.fastest_batch, c.fastest_images_per_second)
                 : "-")
         << " | "
         << (c.fit ? fmt::format("{} MiB + {:.3f} MiB x batch",
                                 mib(static_cast<int64_t>(c.fit->intercept)),
                                 c.fit->slope / (1 << 20))
                   : "needs two batch sizes that fit")
         << " | " << (c.fit ? fmt::format("{:.4f}", c.fit->r_squared) : "-") << " |\n";
    }
    md << "\n## Predicted largest batch per memory size\n\n"
       << "From each setting's fit (peak reserved bytes; on the CPU reserved = allocated). The "
          "first column is this sweep's memory. Predictions leave out memory outside the "
          "allocator (the CUDA context, library workspaces), typically a few hundred MiB on a "
          "GPU.\n\n"
       << "| setting |";
    for (int64_t size : memory_sizes()) md << " " << format_bytes(size) << " |";
    md << "\n|---|";
    for (size_t i = 0; i < memory_sizes().size(); ++i) md << "---|";
    md << "\n";
    for (const auto& c : cells) {
      md << "| " << c.cell.name() << " |";
      for (const auto& [bytes, batch] : c.predictions) {
        md << " " << (batch ? std::to_string(*batch) : "-") << " |";
      }
      md << "\n";
    }
    md << "\nPlots: `peak_memory.png` (peak memory against batch size, the limit drawn), "
          "`throughput.png` (images/s against batch size).\n";
    return md.str();
  }

  void plot() const {
    const std::string problem =
        run_python_script("plot_sweep.py", {dir_.string()}, dir_ / "plot.log");
    if (!problem.empty()) spdlog::warn("plots skipped: {}; the tables are complete", problem);
  }

  Config config_;
  fs::path dir_;
  fs::path executable_;
  torch::Device device_;
  int64_t limit_;
  std::vector<SweepCell> cells_;
  std::vector<SweepTrial> trials_;
};

}  // namespace

std::vector<CellSummary> summarize(const std::vector<SweepCell>& cells,
                                   const std::vector<SweepTrial>& trials,
                                   const std::vector<int64_t>& memory_sizes, bool searched) {
  std::vector<CellSummary> summaries;
  for (const auto& cell : cells) {
    CellSummary s;
    s.cell = cell;
    s.searched = searched;
    std::vector<int64_t> batches, peaks;
    for (const auto& t : trials) {
      if (!(t.cell == cell)) continue;
      if (t.result.status == "ok") {
        s.largest_fitting = std::max(s.largest_fitting.value_or(0), t.batch);
        batches.push_back(t.batch);
        peaks.push_back(t.result.peak_reserved_bytes);
        if (t.result.images_per_second > s.fastest_images_per_second) {
          s.fastest_images_per_second = t.result.images_per_second;
          s.fastest_batch = t.batch;
        }
      } else if (t.result.status == "oom") {
        s.smallest_failing = std::min(s.smallest_failing.value_or(t.batch), t.batch);
      }
    }
    s.fit = fit_memory(batches, peaks);
    for (int64_t size : memory_sizes) {
      s.predictions.emplace_back(size, s.fit ? s.fit->max_batch(size) : std::nullopt);
    }
    summaries.push_back(s);
  }
  return summaries;
}

int run_sweep(const SweepRequest& request) {
  const Config config = load_config(request.config_path, request.overrides);
  set_cpu_threads(config.training.threads);
  const torch::Device device = resolve_device(config.training.device);
  for (auto precision : config.sweep.precisions) {
    check_precision_supported(device, precision, "sweep.precisions");
  }
  if (config.memory.limit > total_memory(device)) {
    throw UserError("memory.limit: " + format_bytes(config.memory.limit) + " is more than " +
                    device.str() + " has (" + format_bytes(total_memory(device)) + ")");
  }
  if (config.sweep.find_max && device.is_cpu() && config.memory.limit == 0) {
    throw UserError(
        "sweep.find_max: on the CPU there is no device memory to fill; set "
        "memory.limit (or --memory-limit) to the card size to emulate");
  }
  const fs::path dir =
      !request.output_dir.empty()
          ? fs::path(request.output_dir)
          : new_run_path(config.output.dir, config.output.name, "sweep-" + arch_name(config.model));
  std::error_code ec;
  const std::string held = fs::exists(dir, ec) ? held_outputs(dir) : "";
  if (!held.empty()) {
    throw UserError(dir.string() + ": already holds " + held + "; choose another --output-dir");
  }
  fs::create_directories(dir / "trials", ec);
  if (ec) throw UserError(dir.string() + ": cannot create the sweep directory: " + ec.message());
  const DirectoryLock lock(dir);
  write_file_atomically(dir / "config.yaml", to_yaml(config));
  install_stop_handlers();
  return Sweep(config, dir, request.executable, device).run() ? kExitOk : kExitStopped;
}

int run_sweep_trial(const std::string& config_path, const std::string& result_path) {
  const Config config = load_config(config_path);
  set_cpu_threads(config.training.threads);
  const TrialResult result =
      run_trial(config, config.sweep.warmup_steps, config.sweep.measure_steps);
  write_file_atomically(result_path, to_json(result).dump(2) + "\n");
  if (result.status == "ok") return kExitOk;
  spdlog::error("{}", result.message);
  return result.status == "oom" ? kExitOutOfMemory : kExitInternalError;
}

}  // namespace training
