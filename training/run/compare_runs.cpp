#include "training/run/compare_runs.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "training/config/config_yaml.h"
#include "training/platform/atomic_file.h"
#include "training/platform/dir_lock.h"
#include "training/platform/errors.h"
#include "training/platform/json_rows.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/run/output_dir.h"
#include "training/run/run_dir.h"
#include "training/run/run_report.h"

namespace training {

namespace fs = std::filesystem;

namespace {

void flatten(const YAML::Node& node, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& entry : node) {
      const std::string key = entry.first.as<std::string>();
      flatten(entry.second, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  // A key left unset (checkpointing.blocks: ~) is one the run has not: "-" in the table, null in
  // compare.json (it was YAML's "~" in both).
  if (node.IsNull()) return;
  YAML::Emitter emitter;
  emitter << YAML::Flow << node;
  out[prefix] = emitter.c_str();
}

std::string value_of(const ComparedRun& run, const std::string& key) {
  const auto found = run.config.find(key);
  return found == run.config.end() ? "-" : found->second;
}

// The largest reserved peak of either phase, on CUDA only ("-" on the CPU).
std::string peak_reserved(const ComparedRun& run, const Totals& t) {
  if (!run.epochs.back().peak_reserved_bytes) return "-";
  return fmt::format("{:.1f}", to_mib(std::max(t.train_reserved, t.eval_reserved)));
}

std::string model_of(const ComparedRun& run) {
  const std::string size = value_of(run, "data.image_size");
  return value_of(run, "model.arch") + " (" + value_of(run, "model.stem") + " stem, " +
         value_of(run, "model.num_classes") + " classes" +
         (size == std::to_string(kStoredImageSize) ? "" : ", " + size + "x" + size) + ")";
}

nlohmann::ordered_json to_json(const ComparedRun& run, const std::vector<std::string>& keys) {
  nlohmann::ordered_json j;
  j["dir"] = run.dir.string();
  j["name"] = run.name;
  j["model"] = model_of(run);
  j["stopped"] =
      run.stopped.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(run.stopped);
  const Totals t = totals_of(run.epochs);
  j["totals"] = {
      {"steady_images_per_second", optional_json(t.steady_images_per_second)},
      {"warmup_steps", t.warmup_steps},
      {"warmup_seconds", t.warmup_seconds},
      {"epoch_seconds", t.epoch_time ? nlohmann::ordered_json(t.epoch_time->seconds) : nullptr},
      {"epoch_seconds_projected", t.epoch_time && t.epoch_time->projected},
      {"projected_from_steps", t.epoch_time ? t.epoch_time->steady_steps : 0},
      {"peak_allocated_bytes", std::max(t.train_allocated, t.eval_allocated)},
      {"peak_reserved_bytes",
       run.epochs.back().peak_reserved_bytes
           ? nlohmann::ordered_json(std::max(t.train_reserved, t.eval_reserved))
           : nullptr},
      {"utilization_mean", optional_json(t.utilization_mean)}};
  auto& differing = j["config"] = nlohmann::ordered_json::object();
  for (const auto& key : keys) {  // null where the run has no such key (a decision not made)
    const auto found = run.config.find(key);
    differing[key] = found == run.config.end() ? nlohmann::ordered_json()
                                               : nlohmann::ordered_json(found->second);
  }
  auto& epochs = j["epochs"] = nlohmann::ordered_json::array();
  for (const auto& e : run.epochs) epochs.push_back(training::to_json(e));
  return j;
}

// Under the table: how its rows are defined.
constexpr const char* kTableNotes =
    "\nAs in each run's report.md. Steady images/s leave out each process's first "
    "warm-up steps (cuDNN's autotuning, first allocations, a graph's capture), which are "
    "listed apart; \"vs the first run\" compares steady rates (all-training rates where "
    "neither run has one; none between the two). Time per epoch: the mean over "
    "whole epochs, or a stopped epoch's time with its missing batches at the steady rate "
    "(projected). Peaks: the largest of any epoch (reserved: CUDA only). Utilisation: the "
    "run's own sampler (GPU on CUDA, the process's CPU share on the CPU). Config rows: the "
    "keys whose values differ between the runs.\n\n"
    "Plots: `accuracy.png` (test accuracy per epoch and against wall time), `loss.png` (test "
    "loss likewise), `memory.png` (peak allocated and reserved per epoch).\n";

// The title, a note when the runs train different models, and the table's header row.
void write_head(std::ostringstream& md, const std::vector<ComparedRun>& runs) {
  md << "# Runs compared\n\n";
  const bool same_model = std::all_of(runs.begin(), runs.end(), [&](const ComparedRun& r) {
    return model_of(r) == model_of(runs.front());
  });
  if (!same_model) {
    md << "**Note: these runs train different models**; their accuracy, time and memory differ "
          "for that reason too.\n\n";
  }
  md << "| |";
  for (const auto& run : runs) md << " " << markdown_text(run.name) << " |";
  md << "\n|---|";
  for (size_t i = 0; i < runs.size(); ++i) md << "---:|";
  md << "\n";
}

}  // namespace

ComparedRun read_compared_run(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw UserError(dir.string() + ": not a directory");
  check_output_format(dir, OutputKind::Run);
  if (!fs::exists(dir / "config.yaml")) {
    throw UserError(dir.string() +
                    ": not a run directory (expected config.yaml and metrics.jsonl, as `train` "
                    "writes them)");
  }
  ComparedRun run;
  run.dir = dir.filename().empty() ? dir.parent_path() : dir;  // "runs/a/" is "runs/a"
  run.name = run.dir.filename().string();
  const bool training_now = locked_by_another_process(dir);  // asked once, for both uses
  const RunRecord record = recorded_run(dir, "compare", training_now);
  run.epochs = record.epochs;
  // The run's config as train reads it: every key, those left out at their defaults.
  const RecordedInputs recorded = recorded_inputs(dir);
  if (!recorded.note.empty()) spdlog::warn("{}", recorded.note);
  const Config& asked = recorded.asked;
  flatten(YAML::Load(run_yaml(asked)), "", run.config);
  // What each run's autos decided (decisions.json), beside what was asked.
  const Decisions& decisions = recorded.decisions;
  if (decisions.layout) {
    run.config["decided.training.memory_format"] = memory_format_name(decisions.layout->format);
  }
  if (const auto& c = decisions.checkpointing) {
    run.config["decided.checkpointing.blocks"] = "[" + config_yaml::join(c->blocks, ", ") + "]";
    run.config["decided.checkpointing.predicted_peak"] = format_bytes(c->predicted_peak);
  }
  if (const auto stopped = stopped_at(record, asked)) {
    run.stopped =
        training_now ? "training now (another train process holds the run)" : stopped->where;
  }
  return run;
}

std::vector<std::string> differing_keys(const std::vector<ComparedRun>& runs) {
  std::vector<std::string> all;
  for (const auto& run : runs) {
    for (const auto& [key, value] : run.config) all.push_back(key);
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  std::vector<std::string> keys;
  for (const auto& key : all) {
    if (key.rfind("output.", 0) == 0) continue;
    const std::string first = value_of(runs.front(), key);
    for (const auto& run : runs) {
      if (value_of(run, key) != first) {
        keys.push_back(key);
        break;
      }
    }
  }
  return keys;
}

std::string compare_markdown(const std::vector<ComparedRun>& runs) {
  const auto keys = differing_keys(runs);
  std::ostringstream md;
  write_head(md, runs);
  std::vector<Totals> totals;  // the report's totals of each run
  for (const auto& run : runs) totals.push_back(totals_of(run.epochs));
  // One row: cell(run, its totals) for each run, in column order.
  auto row = [&](const std::string& name, const auto& cell) {
    md << "| " << name << " |";
    for (size_t i = 0; i < runs.size(); ++i)
      md << " " << markdown_text(cell(runs[i], totals[i])) << " |";
    md << "\n";
  };
  for (const auto& key : keys) {
    row("`" + key + "`", [&](const ComparedRun& r, const Totals&) { return value_of(r, key); });
  }
  row("model", [](const ComparedRun& r, const Totals&) { return model_of(r); });
  row("device", [](const ComparedRun& r, const Totals&) { return r.epochs.back().device; });
  row("epochs",
      [](const ComparedRun& r, const Totals&) { return std::to_string(r.epochs.size()); });
  row("effective batch (micro-batches)", [](const ComparedRun& r, const Totals&) {
    const auto& e = r.epochs.back();
    return fmt::format("{} ({})", e.effective_batch_size, e.accumulate_steps);
  });
  row("final test accuracy", [](const ComparedRun& r, const Totals&) {
    return fmt::format("{:.2f}%", 100 * r.epochs.back().test_acc);
  });
  // Steady images/s where the runs recorded it (warm-up steps apart), else over all training.
  const auto rate = [](const Totals& t) {
    return t.steady_images_per_second.value_or(t.images / std::max(t.train_seconds, 1e-12));
  };
  row("stopped", [](const ComparedRun& r, const Totals&) {
    return r.stopped.empty() ? std::string("no") : r.stopped;
  });
  row("diverged", [](const ComparedRun& r, const Totals&) {
    const EpochRecord* diverged = first_diverged(r.epochs);
    return diverged ? "in epoch " + std::to_string(diverged->epoch) : std::string("no");
  });
  row("best test accuracy (epoch)", [](const ComparedRun& r, const Totals& t) {
    const auto& best = r.epochs[t.best];
    return fmt::format("{:.2f}% ({})", 100 * best.test_acc, best.epoch);
  });
  row("time per epoch",
      [](const ComparedRun&, const Totals& t) { return format_epoch_time(t.epoch_time); });
  row("images/s, steady", [](const ComparedRun&, const Totals& t) {
    return t.steady_images_per_second ? fmt::format("{:.1f}", *t.steady_images_per_second)
                                      : std::string("-");
  });
  row("warm-up (steps, s)", [](const ComparedRun&, const Totals& t) {
    return fmt::format("{}, {:.1f}", t.warmup_steps, t.warmup_seconds);
  });
  row("images/s, all training time", [](const ComparedRun&, const Totals& t) {
    return fmt::format("{:.1f}", t.images / std::max(t.train_seconds, 1e-12));
  });
  // Like against like: steady rates when both runs have one, all-training rates when neither has
  // (said so), and no ratio between a steady rate and one with the warm-up in it.
  row("images/s vs the first run", [&](const ComparedRun&, const Totals& t) {
    const Totals& first = totals.front();
    if (t.steady_images_per_second.has_value() != first.steady_images_per_second.has_value()) {
      return std::string("- (one of the two has no steady rate)");
    }
    return fmt::format("{:.2f}x{}", rate(t) / std::max(rate(first), 1e-12),
                       t.steady_images_per_second ? "" : " (all training time)");
  });
  row("peak allocated (MiB)", [](const ComparedRun&, const Totals& t) {
    return fmt::format("{:.1f}", to_mib(std::max(t.train_allocated, t.eval_allocated)));
  });
  row("peak reserved (MiB)", peak_reserved);
  row("utilisation, mean (sampler)", [](const ComparedRun&, const Totals& t) {
    return t.utilization_mean ? fmt::format("{:.0f}%", 100 * *t.utilization_mean)
                              : std::string("-");
  });
  row("waiting for data", [](const ComparedRun&, const Totals& t) {
    return fmt::format("{:.1f}%", 100 * t.data_seconds / std::max(t.train_seconds, 1e-12));
  });
  md << kTableNotes;
  return md.str();
}

fs::path compare_command(const CompareRequest& request) {
  if (request.run_dirs.empty()) throw UserError("compare: expected one or more run directories");
  // The output folder first: one another process writes is refused naming that process, also
  // where it is one of the runs given (a run still training has no metrics.jsonl yet).
  if (!request.output_dir.empty()) {
    check_output_dir(request.output_dir, OutputKind::Comparison, "--output");
  }
  std::vector<ComparedRun> runs;
  for (const auto& dir : request.run_dirs) runs.push_back(read_compared_run(dir));
  // One run given twice ("run" and "./run") would be two equal columns under one heading.
  for (size_t i = 0; i < runs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      std::error_code ec;
      if (fs::equivalent(runs[i].dir, runs[j].dir, ec)) {
        throw UserError(request.run_dirs[i] + ": given twice (also as " + request.run_dirs[j] +
                        "); compare each run once");
      }
    }
  }
  for (auto& run : runs) {
    const auto same_name = [&](const ComparedRun& other) {
      return other.dir.filename() == run.dir.filename();
    };
    run.name = std::count_if(runs.begin(), runs.end(), same_name) > 1 ? run.dir.string()
                                                                      : run.dir.filename().string();
  }
  const fs::path out = !request.output_dir.empty() ? fs::path(request.output_dir)
                                                   : new_run_path("runs", "", "compare");
  // Locked: a second comparison into the same folder is refused.
  const auto lock = claim_output_dir(out, OutputKind::Comparison, "--output");
  const std::string markdown = compare_markdown(runs);
  nlohmann::ordered_json j;
  const auto keys = differing_keys(runs);
  j["runs"] = nlohmann::ordered_json::array();
  for (const auto& run : runs) j["runs"].push_back(to_json(run, keys));
  write_file_atomically(out / "compare.json", j.dump(2) + "\n");
  write_file_atomically(out / "compare.md", markdown);
  const std::string failed = run_python_script("plot_compare.py", {out.string()}, out / "plot.log");
  if (!failed.empty()) spdlog::warn("plots skipped: {}; the table is complete", failed);
  mark_finished(out, OutputKind::Comparison);
  std::cout << markdown;
  spdlog::info("comparison written to {}", out.string());
  return out;
}

}  // namespace training
