#include "training/studies/sweep_report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "training/cards/alloc_conf.h"
#include "training/platform/atomic_file.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"
#include "training/platform/json_rows.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/platform/statistics.h"
#include "training/run/output_dir.h"

namespace training {

std::string run_flags(const Setting& setting, int64_t batch, int64_t memory_limit) {
  return setting.set_flags(batch) +
         (memory_limit > 0 ? " --memory-limit " + byte_size_text(memory_limit) : "");
}

std::string largest_fitting_text(const SettingSummary& c) {
  if (!c.largest_fitting) return "none";
  if (!c.max_batch_reached) return std::to_string(*c.largest_fitting);
  return "at least " + std::to_string(*c.largest_fitting) +
         " (the search stops at sweep.max_batch, " + std::to_string(c.max_batch) + ")";
}

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

std::vector<ordered_json> trial_rows(const std::vector<SweepTrial>& trials,
                                     const std::string& card) {
  std::vector<ordered_json> rows;
  for (const auto& t : trials) {
    ordered_json row = {{"trial", t.id}};
    row.update(t.setting.json());
    row["batch_size"] = t.batch;
    row["source"] = t.source;
    row.update(to_json(t.result));
    row["wall_seconds"] = t.wall_seconds;
    if (t.on_card) row.update(prediction_columns(*t.on_card));
    if (!t.on_card_error.empty()) {
      row["card"] = card;
      row["card_prediction_error"] = t.on_card_error;
    }
    rows.push_back(row);
  }
  return rows;
}

ordered_json cell_summary_json(const SettingSummary& c) {
  ordered_json entry = c.setting.json();
  entry["largest_fitting_batch"] = optional_json(c.largest_fitting);
  entry["smallest_failing_batch"] = optional_json(c.smallest_failing);
  entry["max_batch_searched"] = c.searched;
  entry["max_batch_reached"] = c.max_batch_reached;
  entry["fastest_batch"] = optional_json(c.fastest_batch);
  entry["fastest_images_per_second"] =  // null beside a null fastest batch: nothing measured
      c.fastest_batch ? ordered_json(c.fastest_images_per_second) : ordered_json(nullptr);
  entry["fit"] = c.fit ? ordered_json{{"intercept_bytes", c.fit->intercept},
                                      {"bytes_per_sample", c.fit->slope},
                                      {"r_squared", c.fit->r_squared},
                                      {"points", c.fit->points}}
                       : ordered_json(nullptr);
  ordered_json predictions = ordered_json::array();
  for (const auto& [bytes, batch] : c.predictions) {
    predictions.push_back({{"memory_bytes", bytes}, {"max_batch", optional_json(batch)}});
  }
  entry["predictions"] = predictions;
  return entry;
}

// With --card: each trial's prediction on that card beside what it measured here, and the trials
// not predicted (their card_prediction_error: checkpointing auto, a stream that cannot be scaled).
void card_table(std::ostringstream& md, const std::vector<SweepTrial>& trials,
                const std::string& card_name) {
  const auto first = std::find_if(trials.begin(), trials.end(),
                                  [](const SweepTrial& t) { return t.on_card.has_value(); });
  const auto unpredicted = std::count_if(
      trials.begin(), trials.end(), [](const SweepTrial& t) { return !t.on_card_error.empty(); });
  if (first == trials.end() && unpredicted == 0) return;
  if (first == trials.end()) {
    md << "## Predicted on " << card_name << "\n\n";
  } else {
    const CardPrediction& card = *first->on_card;
    md << "## Predicted on " << card.card.name << " (" << format_bytes(card.card.memory_bytes)
       << "; this machine's allocation stream replayed on the caching allocator's model, options "
       << alloc_conf_label(alloc_conf_text(card.allocator))
       << "; docs/commands.md, `train memory --card`)\n\n"
       << "| # | setting | batch | predicted allocated (MiB) | predicted reserved (MiB) | "
          "on the device (MiB) | fits | largest batch on the card | estimated img/s |\n"
       << "|---|---|---|---|---|---|---|---|---|\n";
    const SweepTrial* fastest = nullptr;  // of those that fit, by the speed model
    for (const auto& t : trials) {
      if (!t.on_card) continue;
      const CardPrediction& p = *t.on_card;
      md << "| " << t.id << " | " << t.setting.name() << " | " << t.batch << " | "
         << mib_text(p.figures().peak_allocated) << " | " << mib_text(p.figures().peak_reserved)
         << " | " << mib_text(p.device_bytes()) << " | " << p.fits_text() << " | "
         << p.largest_batch_text() << " | "
         << (p.speed ? rate_text(p.speed->images_per_second()) : "-") << " |\n";
      if (p.fits() && p.speed &&
          (!fastest ||
           p.speed->images_per_second() > fastest->on_card->speed->images_per_second())) {
        fastest = &t;
      }
    }
    md << "\n";
    if (fastest) {
      const StepEstimate& e = *fastest->on_card->speed;
      md << fmt::format(
          "Fastest on {} of the trials that fit, estimated ({}): #{} {} at batch {}, "
          "{} img/s; {}.\n\n",
          card.card.name, kSpeedModelName, fastest->id, fastest->setting.name(), fastest->batch,
          rate_text(e.images_per_second()), e.why());
    } else if (!card.no_speed.empty()) {
      md << "Speed on the card: " << card.no_speed << ".\n\n";
    }
    if (card.reducer_bucket_bytes > 0) {
      md << "Each rank holds c10d's Reducer's gradient buckets, "
         << format_bytes(card.reducer_bucket_bytes)
         << " (sweep.data_parallel, distributed.bucket_mb): in the replay. NCCL's own buffers lie "
            "outside the allocator and are not counted.\n\n";
    }
    if (!card.held.resident.empty()) {
      md << "Each trial holds data.device_resident's splits and epoch order on the card, "
         << format_bytes(card.held.resident_bytes()) << ": in the replay.\n\n";
    }
    if (card.limited_by_memory_limit) {
      md << "The allocator is capped at memory.limit, " << format_bytes(card.allocator.limit)
         << ", below what the card leaves it: \"fits\" and the largest batch are under that "
            "limit.\n\n";
    }
  }
  if (unpredicted > 0) {
    md << "Not predicted: " << unpredicted
       << " trial(s), each with its reason in sweep.csv's card_prediction_error.\n\n";
  }
}

void trials_table(std::ostringstream& md, const std::vector<SweepTrial>& trials) {
  md << "## Trials\n\n"
     << "| # | precision | checkpointing | memory format | batch | status | peak allocated (MiB) "
        "| peak reserved (MiB) | steady peak reserved (MiB) | step (s) | images/s |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  // With accumulation a batch is "micro-batch x N" and a step is an optimizer step.
  for (const auto& t : trials) {
    const auto& r = t.result;
    md << "| " << t.id << " | " << precision_name(t.setting.precision) << " | "
       << checkpointing_setting_name(t.setting.checkpointing)
       << (!r.recomputed_blocks || r.recomputed_blocks->empty()
               ? ""
               : " (" + std::to_string(r.recomputed_blocks->size()) + " blocks recomputed)")
       << " | " << memory_format_name(t.setting.memory_format) << " | " << t.batch
       << (t.setting.accumulate_steps > 1 ? " x " + std::to_string(t.setting.accumulate_steps) : "")
       << " | " << status_name(r.status)
       << (r.status == TrialStatus::Error ? ": " + markdown_text(r.message) : "") << " | "
       << mib_text(r.peak_allocated_bytes) << " | " << mib_text(r.peak_reserved_bytes) << " | "
       << (r.steady_peak_reserved_bytes ? mib_text(*r.steady_peak_reserved_bytes) : "-") << " | "
       << (r.median_step_seconds ? fmt::format("{:.4f}", *r.median_step_seconds) : "-") << " | "
       << (r.images_per_second ? rate_text(*r.images_per_second) : "-") << " |\n";
  }
}

void settings_table(std::ostringstream& md, const std::vector<SettingSummary>& cells) {
  md << "\n## Per setting\n\n"
     << "| setting | largest batch that fits | smallest batch that does not | fastest batch "
        "(images/s) | fit: peak = a + b x batch | R² |\n"
     << "|---|---|---|---|---|---|\n";
  for (const auto& c : cells) {
    md << "| " << c.setting.name() << " | " << largest_fitting_text(c)
       << (c.searched ? "" : " (grid only)") << " | "
       << (c.smallest_failing ? std::to_string(*c.smallest_failing) : "-") << " | "
       << (c.fastest_batch
               ? fmt::format("{} ({})", *c.fastest_batch, rate_text(c.fastest_images_per_second))
               : "-")
       << " | "
       << (c.fit
               ? fmt::format("{} MiB + {:.3f} MiB x batch",
                             mib_text(static_cast<int64_t>(c.fit->intercept)), c.fit->slope / kMiB)
           : c.setting.checkpointing == CheckpointMode::Auto
               ? "none for auto (its recomputed blocks change with the batch)"
               : "needs two batch sizes that fit")
       << " | " << (c.fit ? fmt::format("{:.4f}", c.fit->r_squared) : "-") << " |\n";
  }
}

// Each setting's largest batch as `train` must take it: the layout and the rest set, not left to
// train's own auto.
void run_flags_list(std::ostringstream& md, const SweepFacts& facts,
                    const std::vector<SettingSummary>& cells) {
  bool any = false;
  for (const auto& c : cells) {
    if (!c.largest_fitting) continue;
    if (!any) {
      md << "\nTo train a setting's largest batch as it was measured (with `train --config` and "
            "the sweep's config):\n\n";
      any = true;
    }
    const std::string refused =
        untrainable_batch(*c.largest_fitting, c.setting.accumulate_steps, facts.train_images);
    md << "- " << c.setting.name() << ": "
       << (refused.empty() ? "`" +
                                 run_flags(c.setting, *c.largest_fitting,
                                           facts.limit_is_emulated ? facts.memory_limit_bytes : 0) +
                                 "`"
                           : refused)
       << "\n";
  }
}

void predictions_table(std::ostringstream& md, const SweepFacts& facts,
                       const std::vector<SettingSummary>& cells) {
  md << "\n## Predicted largest batch per memory size\n\n"
     << "From each setting's fit (peak reserved bytes; on the CPU reserved = allocated). The "
        "first column is this sweep's memory. Predictions leave out memory outside the allocator "
        "(the CUDA context, library workspaces), typically a few hundred MiB on a GPU.\n\n"
     << "| setting |";
  // The sweep's own memory first; then each --predict-for size as that flag takes it.
  for (size_t i = 0; i < facts.memory_sizes.size(); ++i) {
    const int64_t size = facts.memory_sizes[i];
    md << " " << (i == 0 ? format_bytes(size) : byte_size_text(size)) << " |";
  }
  md << "\n|---|";
  for (size_t i = 0; i < facts.memory_sizes.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& c : cells) {
    md << "| " << c.setting.name() << " |";
    for (const auto& [bytes, batch] : c.predictions) {
      md << " "
         << (batch ? std::to_string(*batch) +
                         beyond_training_set(*batch, c.setting.accumulate_steps, facts.train_images)
                   : "-")
         << " |";
    }
    md << "\n";
  }
}

std::string markdown(const SweepFacts& facts, const std::vector<SettingSummary>& cells,
                     const std::vector<SweepTrial>& trials, bool complete,
                     const std::string& why_incomplete) {
  std::ostringstream md;
  md << "# Batch-size sweep: " << facts.arch << " (" << facts.stem << " stem)"
     << resized_text(facts.image_size) << "\n\n";
  if (!complete) {
    md << "**Not complete** (`complete: false` in sweep.json): "
       << (why_incomplete.empty() ? "the sweep did not finish" : why_incomplete)
       << "; the tables hold the trials measured so far.\n\n";
  }
  md << "Device: " << facts.device_description
     << ". Memory: " << format_bytes(facts.memory_limit_bytes)
     << (facts.limit_is_emulated ? " (emulated with memory.limit)" : " (the device's)")
     << ". Each trial ran in its own process: " << facts.warmup_steps << " warm-up + "
     << facts.measure_steps
     << " measured steps on synthetic images through the run's loader; step time (the step alone) "
        "is the median. Peaks include the first step (what must fit); the steady peak is over the "
        "measured steps after the warm-up. The answers are the training step's: `train` evaluates "
        "at training.eval_batch_size "
     << facts.eval_batch_size
     << ", tried before its first step and split into smaller chunks where it does not fit "
        "(the results do not depend on it).";
  if (facts.data_parallel_bucket_mb > 0) {
    md << " Each trial held what one rank of a data-parallel run holds (sweep.data_parallel): "
          "c10d's reducer with its gradient buckets of "
       << facts.data_parallel_bucket_mb
       << " MiB, in a one-rank process group; the communication with other ranks is not "
          "measured.";
  }
  md << "\n\n";
  trials_table(md, trials);
  card_table(md, trials, facts.card);
  settings_table(md, cells);
  run_flags_list(md, facts, cells);
  predictions_table(md, facts, cells);
  // Drawn after this is written, from the trials that measured a step (none: no plot).
  md << "\nPlots, where drawn ("
     << (complete ? "none where no trial measured a step"
                  : "after the last trial; not after a stop")
     << ")"
     << ": `peak_memory.png` (peak memory against batch size, the limit drawn), "
        "`throughput.png` (images/s against batch size).\n";
  return md.str();
}

}  // namespace

void write_sweep_tables(const fs::path& dir, const SweepFacts& facts,
                        const std::vector<SettingSummary>& cells,
                        const std::vector<SweepTrial>& trials, bool complete,
                        const std::string& why_incomplete) {
  const auto rows = trial_rows(trials, facts.card);
  ordered_json summary = ordered_json::array();
  for (const auto& c : cells) summary.push_back(cell_summary_json(c));
  const ordered_json all = {
      {"arch", facts.arch},
      {"stem", facts.stem},
      {"image_size", facts.image_size},
      {"device", facts.device},
      {"device_description", facts.device_description},
      {"memory_limit_bytes", facts.memory_limit_bytes},
      {"limit_is_emulated", facts.limit_is_emulated},
      {"warmup_steps", facts.warmup_steps},
      {"measure_steps", facts.measure_steps},
      {"data_parallel", facts.data_parallel_bucket_mb > 0},
      {"card", facts.card.empty() ? ordered_json() : ordered_json(facts.card)},
      {"complete", complete},
      {"cells", summary},
      {"trials", rows}};
  write_file_atomically(dir / "sweep.json", all.dump(2) + "\n");
  write_file_atomically(dir / "sweep.csv", rows_to_csv(rows));
  write_file_atomically(dir / "sweep.md", markdown(facts, cells, trials, complete, why_incomplete));
}

SweepRecord read_sweep(const fs::path& dir) {
  const fs::path file = dir / "sweep.json";
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) {
    throw UserError(dir.string() + ": is a file; a sweep is read from its folder (the one " +
                    "holding sweep.json)");
  }
  check_output_format(dir, OutputKind::Sweep);
  if (!fs::is_regular_file(file, ec)) {
    throw UserError(dir.string() + ": holds no sweep (no sweep.json); run `train sweep` first");
  }
  SweepRecord record;
  try {
    std::ifstream in(file);
    const nlohmann::json json = nlohmann::json::parse(in);
    record.arch = read_as<std::string>(json, "arch");
    record.stem = read_as<std::string>(json, "stem");
    record.image_size = read_at_least<int64_t>(json, "image_size", 1);
    record.device = read_as<std::string>(json, "device");
    const auto spec = parse_device_spec(record.device);
    if (!spec || spec->kind == DeviceSpec::Kind::Auto) {
      throw std::invalid_argument("device: '" + record.device + "' is not cpu or cuda:N");
    }
    record.cuda = spec->kind == DeviceSpec::Kind::Cuda;
    record.complete = read_as<bool>(json, "complete");
    for (const auto& cell : json.at("cells")) record.cells.push_back(Setting::from_json(cell));
    const auto& rows = json.at("trials");
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& row = rows[i];
      try {  // checked as the sweep wrote it: a batch of 0 divided a plan's target batch
        SweepTrial trial;
        trial.id = read_at_least<int64_t>(row, "trial", static_cast<int64_t>(i) + 1,
                                          static_cast<int64_t>(i) + 1);  // numbered in order
        trial.setting = Setting::from_json(row);
        trial.batch = read_at_least<int64_t>(row, "batch_size", 1, kMaxBatchSize);
        trial.source = read_as<std::string>(row, "source");
        trial.result = trial_from_json(row);
        trial.wall_seconds = read_at_least<double>(row, "wall_seconds", 0);
        record.trials.push_back(trial);
      } catch (const std::exception& e) {
        throw std::runtime_error("trials[" + std::to_string(i) + "]." + json_error_text(e));
      }
    }
  } catch (const std::exception& e) {
    throw UserError(file.string() +
                    ": not a sweep written by `train sweep`: " + json_error_text(e));
  }
  return record;
}

void plot_sweep(const fs::path& dir, bool complete) {
  const std::string problem = run_python_script("plot_sweep.py", {dir.string()}, dir / "plot.log");
  if (!problem.empty()) {
    spdlog::warn("plots skipped: {}; the tables {}", problem,
                 complete ? "are complete" : "hold the trials measured so far (complete: false)");
  }
}

}  // namespace training
