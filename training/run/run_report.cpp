#include "training/run/run_report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>

#include "training/config/config.h"
#include "training/config/config_yaml.h"
#include "training/parts/checkpoint_choice.h"
#include "training/platform/atomic_file.h"
#include "training/platform/dir_lock.h"
#include "training/platform/duration.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/run/checkpoint_io.h"
#include "training/run/diagnosis.h"
#include "training/run/output_dir.h"
#include "training/run/run_dir.h"

namespace training {

namespace fs = std::filesystem;

namespace {

// "90%: 0:41 (epoch 12), 93%: not reached", over training.accuracy_thresholds.
std::string time_to_accuracy(const std::vector<EpochRecord>& epochs, const Config& c) {
  const auto crossings = accuracy_crossings(epochs, c.training.accuracy_thresholds);
  std::string text;
  for (const double threshold : c.training.accuracy_thresholds) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{:g}%: ", 100 * threshold);
    const auto found = std::find_if(crossings.begin(), crossings.end(),
                                    [&](const auto& x) { return x.threshold == threshold; });
    text += found == crossings.end()
                ? "not reached"
                : fmt::format("{} (epoch {})", format_duration(found->seconds), found->epoch);
  }
  return text.empty() ? "-" : text;
}

// `c` with the run's decisions in place (config/decisions.h's decided()).
std::string checkpointing_text(const CheckpointingOptions& c) {
  switch (c.mode()) {
    case CheckpointMode::Off:
      return "false";
    case CheckpointMode::On:
      return "true (" + granularity_name(c.granularity()) + ")";
    case CheckpointMode::Auto:
      break;
  }
  const auto& blocks = c.blocks().value_or(std::vector<std::string>{});
  return "auto: " + (blocks.empty() ? std::string("no block recomputed")
                                    : "recomputes " + config_yaml::join(blocks, ", "));
}

// checkpointing auto: the budget, the prediction, and the peak the run measured beside it.
void write_checkpointing(std::ostringstream& md, const Config& c, const Decisions& decisions,
                         const std::vector<EpochRecord>& epochs) {
  const auto& d = decisions.checkpointing;
  if (c.checkpointing.mode() != CheckpointMode::Auto || !d || d->predicted_peak <= 0) return;
  // The last epoch trained under this choice (a resume may have chosen again since).
  const std::optional<int64_t> measured = peak_under(*d, epochs);
  bool exceeded = false;
  const int64_t named = budget_named(c);
  const std::string outcome = measured ? checkpointing_outcome(d, *measured, &exceeded, named) : "";
  // The peaks: never two written alike where they differ; the budget as the choice's line and
  // the outcome write it.
  const auto sizes = format_bytes_apart({d->budget, d->predicted_peak + d->beside_bytes,
                                         d->predicted_peak, measured.value_or(0), named});
  md << "## Gradient checkpointing: auto\n\n| | |\n|---|---|\n"
     << "| blocks recomputed | " << checkpointing_text(c.checkpointing) << " |\n"
     << "| budget | " << budget_text(*d, named) << " |\n"
     << "| held beside the step | " << format_bytes(d->beside_bytes) << " |\n"
     << "| chosen for | " << d->chosen_for << " |\n"
     << "| predicted training peak | " << sizes[1] << " (the step " << sizes[2] << ") |\n"
     << "| measured training peak | "
     << (measured ? sizes[3] + " (the last epoch's under this choice)"
                  : std::string("none yet: no epoch was recorded under this choice"))
     << " |\n"
     << fmt::format("| predicted time added to a step | {:.0f} ms |\n", d->predicted_extra_ms)
     << "\n"
     << (exceeded ? "**Over budget:** " : "") << outcome << (outcome.empty() ? "" : ".\n\n");
}

// "channels_last" as set, or "auto: channels_last" as decided.
std::string layout_text(const Config& asked, const Decisions& decisions) {
  if (asked.training.memory_format || !decisions.layout) {
    return memory_format_name(asked.training.memory_format);
  }
  return "auto: " + memory_format_name(decisions.layout->format);
}

// Where the images came from: synthetic data has no root (data.root is not read).
std::string data_text(const data::DataOptions& d) {
  const std::string limits = ", train_limit " + std::to_string(d.train_limit()) + ", test_limit " +
                             std::to_string(d.test_limit());
  if (d.source() == data::Source::Synthetic) {
    return fmt::format("synthetic ({} training / {} test images, generated in memory){}",
                       d.synthetic_train_size(), d.synthetic_test_size(), limits);
  }
  return source_name(d.source()) + " from " + d.root() + limits;
}

void write_setup(std::ostringstream& md, const Config& c, const std::string& layout,
                 const EpochRecord& last) {
  const auto& d = c.data.dataset;
  md << "## Setup\n\n| | |\n|---|---|\n"
     << "| model | " << arch_name(c.model) << ", " << stem_name(c.model) << " stem, "
     << c.model.num_classes() << " classes" << resized_text(c.data.image_size) << " |\n"
     << "| device | " << last.device << " (configured: " << c.training.device << ") |\n"
     << "| precision / memory format | " << precision_name(c.training.precision) << " / " << layout
     << " |\n"
     << "| gradient checkpointing | " << checkpointing_text(c.checkpointing) << " |\n"
     << "| data | " << markdown_text(data_text(d)) << " |\n"
     << "| batch / epochs | " << batch_description(c, last.world_size) << " / " << c.training.epochs
     << " |\n"
     << fmt::format("| optimizer | SGD lr {}, momentum {}, nesterov {}, weight decay {} |\n",
                    c.optimizer.lr(), c.optimizer.momentum(), c.optimizer.nesterov(),
                    c.optimizer.weight_decay())
     << "| schedule | " << schedule_name(c.schedule.kind()) << ", warm-up "
     << c.schedule.warmup_epochs() << " epochs |\n"
     << "| memory limit | "
     << (c.memory.limit > 0 ? byte_size_text(c.memory.limit) : std::string("none")) << " |\n\n";
}

bool reached_its_end(const Config& c, int64_t epochs_done, int64_t step) {
  return epochs_done >= c.training.epochs ||
         (c.training.max_steps > 0 && step >= c.training.max_steps);
}

}  // namespace

std::optional<Stopped> stopped_at(const RunRecord& run, const Config& c) {
  const auto& [epochs, at] = run;
  if (first_diverged(epochs)) return std::nullopt;  // its own row says where it stopped
  const auto& last = epochs.back();
  const int64_t epoch = at ? at->epoch : last.epoch, step = at ? at->step : last.step;
  // Its rows may say it reached its end where its checkpoint does not: training.max_steps ended an
  // epoch part-way under torch_data, which checkpoints no part of an epoch.
  if (reached_its_end(c, epoch, step) || reached_its_end(c, last.epoch, last.step))
    return std::nullopt;
  TrainState recorded;  // without a readable checkpoint, the last epoch recorded
  recorded.epoch = last.epoch;
  recorded.step = last.step;
  return Stopped{position_text(at ? *at : recorded) +
                     fmt::format(", before the end of its {} epoch(s)", c.training.epochs),
                 at.has_value()};
}

namespace {

// The row of a run that has not reached its end (stopped, or killed): where it stands and the
// command that continues it (the run's absolute path: the file is read from anywhere), or, held by
// another process, that it is training; empty for a run that reached it or diverged.
std::string stopped_row(const fs::path& run_dir, const RunRecord& run, const Config& c,
                        bool in_training) {
  const std::vector<EpochRecord>& epochs = run.epochs;
  const std::optional<Stopped> stopped = stopped_at(run, c);
  if (!stopped) return "";
  if (in_training) {
    return fmt::format(
        "| **training** | another train process holds the run now: the figures below are of the "
        "{} epoch(s) recorded so far, of its {} |\n",
        epochs.size(), c.training.epochs);
  }
  const std::string recorded =
      fmt::format(": the figures below are of the {} epoch(s) recorded", epochs.size());
  if (!stopped->resumable) {
    return "| **stopped** | " + stopped->where + recorded +
           "; no readable checkpoint.pt, so it cannot be continued |\n";
  }
  // The command as typed (a '|' in the path escaped for the table, shown as typed).
  return "| **stopped** | " + stopped->where + recorded + "; continue with: " +
         markdown_text(advised_program() + " --resume " +
                       shell_word(fs::absolute(run_dir).string())) +
         " |\n";
}

void write_results(std::ostringstream& md, const std::vector<EpochRecord>& epochs, const Totals& t,
                   const Config& c, const std::string& stopped) {
  const auto& last = epochs.back();
  const auto& best = epochs[t.best];
  const bool cuda = last.device.rfind("cuda", 0) == 0;
  const EpochRecord* diverged = first_diverged(epochs);
  const double wait = t.train_seconds > 0 ? t.data_seconds / t.train_seconds : 0;
  md << "## Results\n\n| | |\n|---|---|\n"
     << stopped
     << fmt::format("| final test accuracy | {:.2f}% (epoch {}) |\n", 100 * last.test_acc,
                    last.epoch)
     << fmt::format("| best test accuracy | {:.2f}% (epoch {}) |\n", 100 * best.test_acc,
                    best.epoch)
     << (diverged ? "| **diverged** | " + divergence_text(*diverged) +
                        "; the run stopped there (lower optimizer.lr) |\n"
                  : std::string())
     << fmt::format("| epochs / steps | {} / {} |\n", epochs.size(), last.step)
     << "| time to accuracy (training + evaluation) | " << time_to_accuracy(epochs, c) << " |\n"
     << "| training time | " << format_duration(t.train_seconds) << " ("
     << fmt::format("{:.1f}", t.train_seconds) << " s), evaluation "
     << fmt::format("{:.1f}", t.eval_seconds) << " s |\n"
     << fmt::format("| mean throughput | {:.1f} images/s |\n",
                    t.train_seconds > 0 ? t.images / t.train_seconds : 0.0)
     << "| steady throughput (after " << t.warmup_steps << " warm-up steps, "
     << fmt::format("{:.1f} s", t.warmup_seconds) << ") | "
     << (t.steady_images_per_second ? fmt::format("{:.1f} images/s", *t.steady_images_per_second)
                                    : std::string("no step after the warm-up"))
     << " |\n"
     << "| time per epoch | " << format_epoch_time(t.epoch_time) << " |\n"
     << "| peak memory, training (allocator) | " << format_bytes(t.train_allocated) << " allocated"
     << (cuda ? ", " + format_bytes(t.train_reserved) + " reserved" : "") << " |\n"
     << "| peak memory, evaluation (allocator) | " << format_bytes(t.eval_allocated) << " allocated"
     << (cuda ? ", " + format_bytes(t.eval_reserved) + " reserved" : "")
     << (t.eval_allocated > t.train_allocated
             ? " (sets the run's peak: lower training.eval_batch_size)"
             : "")
     << " |\n"
     << "| peak memory (sampled) | "
     << (t.device_used > 0
             ? format_bytes(t.device_used) + (cuda ? " used on the GPU (NVML)" : " process RSS")
             : "not sampled")
     << " |\n"
     << fmt::format("| waiting for data | {:.1f}% of training time |\n\n", 100 * wait);
  const Diagnosis diagnosis =
      diagnose(wait, t.utilization_mean, cuda, c.monitor, prefetch_for(c.data, cuda));
  if (diagnosis.input_bound) {
    md << "**Verdict: input-bound.** ";
  } else {
    md << fmt::format(
        "**Verdict: compute-bound.** The loop waited for data {:.1f}% of the time (threshold "
        "{:.0f}%). ",
        100 * wait, 100 * c.monitor.data_wait_threshold);
  }
  for (const auto& finding : diagnosis.findings) md << finding << ". ";
  md << "\n\n";
}

void write_epochs(std::ostringstream& md, const std::vector<EpochRecord>& epochs) {
  md << "## Epochs\n\n"
     << "| epoch | step | lr | train loss | train acc | test loss | test acc | train s | images/s "
        "| data wait | training peak MiB | evaluation peak MiB |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : epochs) {
    md << fmt::format(
        "| {} | {} | {:.4g} | {:.4f} | {:.2f}% | {:.4f} | {:.2f}% | {:.1f} | {:.1f} | {:.1f}% | "
        "{:.1f} | {:.1f} |\n",
        r.epoch, r.step, r.lr, r.train_loss, 100 * r.train_acc, r.test_loss, 100 * r.test_acc,
        r.epoch_seconds, r.images_per_second, 100 * r.data_wait_fraction,
        to_mib(std::max(r.train_peak_allocated_bytes, r.train_peak_reserved_bytes.value_or(0))),
        to_mib(std::max(r.eval_peak_allocated_bytes, r.eval_peak_reserved_bytes.value_or(0))));
  }
}

}  // namespace

Totals totals_of(const std::vector<EpochRecord>& epochs) {
  Totals t;
  double utilization_sum = 0, steady_images = 0, steady_seconds = 0, whole_seconds = 0;
  int utilization_epochs = 0;
  int64_t whole = 0;
  for (size_t i = 0; i < epochs.size(); ++i) {
    const auto& r = epochs[i];
    t.train_seconds += r.epoch_seconds;
    t.eval_seconds += r.eval_seconds;
    t.data_seconds += r.data_seconds;
    t.images += r.images_per_second * r.epoch_seconds;
    t.train_allocated = std::max(t.train_allocated, r.train_peak_allocated_bytes);
    t.train_reserved = std::max(t.train_reserved, r.train_peak_reserved_bytes.value_or(0));
    t.eval_allocated = std::max(t.eval_allocated, r.eval_peak_allocated_bytes);
    t.eval_reserved = std::max(t.eval_reserved, r.eval_peak_reserved_bytes.value_or(0));
    t.device_used = std::max(t.device_used, r.memory_used_max_bytes.value_or(0));
    if (r.utilization_mean) utilization_sum += *r.utilization_mean, ++utilization_epochs;
    if (r.test_acc > epochs[t.best].test_acc) t.best = i;
    t.warmup_steps += r.warmup_steps;
    t.warmup_seconds += r.warmup_seconds;
    if (r.steady_images_per_second) {
      const double seconds = std::max(r.epoch_seconds - r.warmup_seconds, 0.0);
      steady_images += *r.steady_images_per_second * seconds;
      steady_seconds += seconds;
    }
    const auto time = epoch_time(r);
    if (time && !time->projected) whole_seconds += time->seconds, ++whole;
  }
  if (utilization_epochs > 0) t.utilization_mean = utilization_sum / utilization_epochs;
  if (steady_seconds > 0) t.steady_images_per_second = steady_images / steady_seconds;
  if (whole > 0) {
    t.epoch_time = EpochTime{whole_seconds / static_cast<double>(whole)};
  } else {
    t.epoch_time = epoch_time(epochs.back());
  }
  return t;
}

std::string format_epoch_time(const std::optional<EpochTime>& time) {
  if (!time) return "-";
  if (!time->projected) return fmt::format("{:.2f} s", time->seconds);
  return fmt::format("{:.1f} s, projected from {} steady steps", time->seconds, time->steady_steps);
}

fs::path write_report(const fs::path& run_dir, bool in_training) {
  const RunRecord run = recorded_run(run_dir, "report", in_training);
  const std::vector<EpochRecord>& epochs = run.epochs;
  const RecordedInputs recorded = recorded_inputs(run_dir);
  if (!recorded.note.empty()) spdlog::warn("{}", recorded.note);
  const Config& asked = recorded.asked;
  const Decisions& decisions = recorded.decisions;
  const Config config = decided(asked, decisions);
  const std::string plot_problem =
      run_python_script("plot_run.py", {fs::absolute(run_dir).string()}, run_dir / "plot.log");

  std::ostringstream md;
  md << "# Run report: " << markdown_text(run_dir.filename().string()) << "\n\n";
  if (!recorded.note.empty()) md << "**Note:** " << markdown_text(recorded.note) << ".\n\n";
  write_setup(md, config, layout_text(asked, decisions), epochs.back());
  write_results(md, epochs, totals_of(epochs), config,
                stopped_row(run_dir, run, config, in_training));
  write_checkpointing(md, config, decisions, epochs);
  write_epochs(md, epochs);
  md << "\n## Plots\n\n";
  if (plot_problem.empty()) {
    md << "![loss and accuracy](loss_accuracy.png)\n\n![throughput](throughput.png)\n\n"
          "![memory](memory.png)\n";
  } else {
    md << "Not drawn: " << markdown_text(plot_problem) << ".\n";
  }
  md << "\nFiles: `config.yaml`"
     << (fs::exists(run_dir / "decisions.json") ? ", `decisions.json`" : "")
     << ", `metrics.jsonl` / `metrics.csv`, `train.log`"
     << (fs::exists(run_dir / "gpu.jsonl") ? ", `gpu.jsonl`" : "")
     << (fs::exists(run_dir / "trace.json") ? ", `trace.json` (open in https://ui.perfetto.dev)"
                                            : "")
     << ", `checkpoint.pt`.\n";
  const fs::path report = run_dir / "report.md";
  write_file_atomically(report, md.str());
  if (!plot_problem.empty()) spdlog::warn("report plots skipped: {}", plot_problem);
  return report;
}

fs::path report_command(const fs::path& run_dir) {
  check_output_format(run_dir, OutputKind::Run);
  const bool in_training = locked_by_another_process(run_dir);
  // Held for the whole report when it can be taken, so that no other command's temporaries are
  // taken for stale; a run being trained keeps its lock, and its report is written without it.
  std::optional<DirectoryLock> lock;
  if (held_outputs(run_dir).kind == OutputKind::Run) {
    try {
      lock.emplace(run_dir);
    } catch (const UserError&) {
      // Held by a training process, or a folder that cannot be locked (read-only).
    }
  }
  if (lock) {
    const int stale = remove_stale_temporaries(run_dir);
    if (stale > 0) {
      spdlog::info("removed {} temporary file(s) an interrupted write left in {}", stale,
                   run_dir.string());
    }
  }
  return write_report(run_dir, in_training);
}

}  // namespace training
