#include "training/report.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "training/atomic_file.h"
#include "training/errors.h"
#include "training/memory.h"
#include "training/process.h"
#include "training/progress.h"
#include "training/run_dir.h"

namespace training {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

double number(const json& row, const char* key) {
  return row.contains(key) && row[key].is_number() ? row[key].get<double>() : 0.0;
}

std::string config_value(const YAML::Node& config, const char* section, const char* key) {
  const YAML::Node s = config[section];
  if (!s.IsDefined() || !s.IsMap()) return "?";
  const YAML::Node v = s[key];
  return v.IsDefined() && v.IsScalar() ? v.Scalar() : "?";
}

}  // namespace

fs::path write_report(const fs::path& run_dir) {
  const auto rows = read_jsonl(run_dir / "metrics.jsonl");
  if (!fs::exists(run_dir / "metrics.jsonl") || rows.empty()) {
    throw UserError(run_dir.string() + ": no metrics.jsonl with epochs, so no run to report on");
  }
  YAML::Node config;
  try {
    if (fs::exists(run_dir / "config.yaml"))
      config = YAML::LoadFile((run_dir / "config.yaml").string());
  } catch (const YAML::Exception&) {
    throw UserError((run_dir / "config.yaml").string() + ": not readable YAML");
  }
  const auto c = [&](const char* section, const char* key) {
    return config_value(config, section, key);
  };

  double train_seconds = 0, eval_seconds = 0, data_seconds = 0, images = 0;
  int64_t train_allocated = 0, train_reserved = 0, eval_allocated = 0, eval_reserved = 0;
  int64_t device_used = 0;
  size_t best = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    train_seconds += number(r, "epoch_seconds");
    eval_seconds += number(r, "eval_seconds");
    data_seconds += number(r, "data_seconds");
    images += number(r, "images_per_second") * number(r, "epoch_seconds");
    const auto largest = [&](int64_t& into, const char* key) {
      into = std::max(into, static_cast<int64_t>(number(r, key)));
    };
    largest(train_allocated, "train_peak_allocated_bytes");
    largest(train_reserved, "train_peak_reserved_bytes");
    largest(eval_allocated, "eval_peak_allocated_bytes");
    largest(eval_reserved, "eval_peak_reserved_bytes");
    device_used = std::max(device_used, static_cast<int64_t>(number(r, "memory_used_max_bytes")));
    if (number(r, "test_acc") > number(rows[best], "test_acc")) best = i;
  }
  const auto& last = rows.back();
  const double wait = train_seconds > 0 ? data_seconds / train_seconds : 0;
  const double threshold = config["monitor"] && config["monitor"]["data_wait_threshold"]
                               ? config["monitor"]["data_wait_threshold"].as<double>()
                               : 0.10;
  const bool cuda = last.value("device", std::string("cpu")).rfind("cuda", 0) == 0;

  const std::string plot_problem =
      run_python_script("plot_run.py", {run_dir.string()}, run_dir / "plot.log");

  std::ostringstream md;
  md << "# Run report: " << run_dir.filename().string() << "\n\n"
     << "## Setup\n\n"
     << "| | |\n|---|---|\n"
     << "| model | " << c("model", "arch") << ", " << c("model", "stem") << " stem, "
     << c("model", "num_classes") << " classes |\n"
     << "| device | " << last.value("device", std::string("?"))
     << " (configured: " << c("training", "device") << ") |\n"
     << "| precision / memory format | " << c("training", "precision") << " / "
     << c("training", "memory_format") << " |\n"
     << "| gradient checkpointing | " << c("checkpointing", "enabled") << " ("
     << c("checkpointing", "granularity") << ") |\n"
     << "| data | " << c("data", "source") << " from " << c("data", "root") << ", train_limit "
     << c("data", "train_limit") << ", test_limit " << c("data", "test_limit") << " |\n"
     << "| batch / epochs | " << c("training", "batch_size") << " / " << c("training", "epochs")
     << " |\n"
     << "| optimizer | SGD lr " << c("optimizer", "lr") << ", momentum "
     << c("optimizer", "momentum") << ", nesterov " << c("optimizer", "nesterov")
     << ", weight decay " << c("optimizer", "weight_decay") << " |\n"
     << "| schedule | " << c("schedule", "name") << ", warm-up " << c("schedule", "warmup_epochs")
     << " epochs |\n"
     << "| memory limit | " << c("memory", "limit") << " |\n\n"
     << "## Results\n\n"
     << "| | |\n|---|---|\n"
     << fmt::format("| final test accuracy | {:.2f}% (epoch {}) |\n",
                    100 * number(last, "test_acc"), last.value("epoch", 0))
     << fmt::format("| best test accuracy | {:.2f}% (epoch {}) |\n",
                    100 * number(rows[best], "test_acc"), rows[best].value("epoch", 0))
     << fmt::format("| epochs / steps | {} / {} |\n", rows.size(), last.value("step", 0))
     << "| training time | " << format_duration(train_seconds) << " ("
     << fmt::format("{:.1f}", train_seconds) << " s), evaluation "
     << fmt::format("{:.1f}", eval_seconds) << " s |\n"
     << fmt::format("| mean throughput | {:.1f} images/s |\n",
                    train_seconds > 0 ? images / train_seconds : 0.0)
     << "| peak memory, training (allocator) | " << format_bytes(train_allocated) << " allocated"
     << (cuda ? ", " + format_bytes(train_reserved) + " reserved" : "") << " |\n"
     << "| peak memory, evaluation (allocator) | " << format_bytes(eval_allocated) << " allocated"
     << (cuda ? ", " + format_bytes(eval_reserved) + " reserved" : "")
     << (eval_allocated > train_allocated ? " (sets the run's peak: lower training.eval_batch_size)"
                                          : "")
     << " |\n"
     << "| peak memory (sampled) | "
     << (device_used > 0
             ? format_bytes(device_used) + (cuda ? " used on the GPU (NVML)" : " process RSS")
             : "not sampled")
     << " |\n"
     << fmt::format("| waiting for data | {:.1f}% of training time |\n\n", 100 * wait);
  if (wait > threshold) {
    md << fmt::format(
        "**Verdict: input-bound.** The loop waited for data {:.0f}% of the time "
        "(threshold {:.0f}%): batches are prepared slower than steps run. Try "
        "`data.device_resident: true`, a larger `data.prefetch` or a larger batch.\n\n",
        100 * wait, 100 * threshold);
  } else {
    md << fmt::format(
        "**Verdict: compute-bound.** The loop waited for data {:.1f}% of the time "
        "(threshold {:.0f}%).\n\n",
        100 * wait, 100 * threshold);
  }
  md << "## Epochs\n\n"
     << "| epoch | step | lr | train loss | train acc | test loss | test acc | train s | images/s "
        "| data wait | training peak MiB | evaluation peak MiB |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    md << fmt::format(
        "| {} | {} | {:.4g} | {:.4f} | {:.2f}% | {:.4f} | {:.2f}% | {:.1f} | {:.1f} | {:.1f}% | "
        "{:.1f} | {:.1f} |\n",
        r.value("epoch", 0), r.value("step", 0), number(r, "lr"), number(r, "train_loss"),
        100 * number(r, "train_acc"), number(r, "test_loss"), 100 * number(r, "test_acc"),
        number(r, "epoch_seconds"), number(r, "images_per_second"),
        100 * number(r, "data_wait_fraction"),
        to_mib(static_cast<int64_t>(std::max(number(r, "train_peak_allocated_bytes"),
                                             number(r, "train_peak_reserved_bytes")))),
        to_mib(static_cast<int64_t>(std::max(number(r, "eval_peak_allocated_bytes"),
                                             number(r, "eval_peak_reserved_bytes")))));
  }
  md << "\n## Plots\n\n";
  if (plot_problem.empty()) {
    md << "![loss and "
          "accuracy](loss_accuracy.png)\n\n![throughput](throughput.png)\n\n![memory](memory.png)"
          "\n";
  } else {
    md << "Not drawn: " << plot_problem << ".\n";
  }
  md << "\nFiles: `config.yaml`, `metrics.jsonl` / `metrics.csv`, `train.log`"
     << (fs::exists(run_dir / "gpu.jsonl") ? ", `gpu.jsonl`" : "")
     << (fs::exists(run_dir / "trace.json") ? ", `trace.json` (open in https://ui.perfetto.dev)"
                                            : "")
     << ", `checkpoint.pt`.\n";
  const fs::path report = run_dir / "report.md";
  write_file_atomically(report, md.str());
  if (!plot_problem.empty()) spdlog::warn("report plots skipped: {}", plot_problem);
  return report;
}

}  // namespace training
