// `train`: command-line parsing and dispatch only. Every behaviour lives in the libraries.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "data/split.h"
#include "training/atomic_file.h"
#include "training/bench_matmul.h"
#include "training/device.h"
#include "training/distributed.h"
#include "training/errors.h"
#include "training/memory.h"
#include "training/process.h"
#include "training/report.h"
#include "training/run.h"
#include "training/run_dir.h"
#include "training/sweep.h"

namespace {

using training::first_line;
using training::kExitBadInput;
using training::kExitCannotWrite;
using training::kExitDistributed;
using training::kExitInternalError;
using training::kExitOk;
using training::kExitOutOfMemory;

const char* kExamples = R"(Examples:
  train --config configs/resnet50_cifar10.yaml
  train --config configs/quick_cpu.yaml --set training.epochs=2 --set data.train_limit=5000
  train --config configs/resnet50_cifar10.yaml --device cpu --output-dir runs/rn50-cpu
  train --resume runs/rn50-cpu --set training.epochs=40
  train --config configs/resnet50_cifar10.yaml --set training.precision=bf16 --memory-limit 12GiB
  train sweep --config configs/sweep_cpu.yaml --find-max --memory-limit 2GiB
  train report runs/rn50-cpu
  train bench matmul --size 4096 --devices cpu,cuda --dtypes fp32,bf16
  train --config configs/quick_cpu.yaml --print-config

Exit codes: 0 done, 1 internal error, 2 bad input (arguments, config, data),
3 out of memory (device or memory.limit), 4 lost contact with the other data-parallel ranks,
5 could not write an output (disk full, quota, file-size limit), 130 stopped by Ctrl-C/SIGTERM
(checkpoint written; continue with --resume).

Data-parallel (torchrun-style environment): scripts/launch.py -n 2 build/train --config FILE)";

// A flag that is shorthand for one config key (--device sets training.device): the one place
// where flags become overrides, for `train` and `train sweep` alike. A list flag's "a,b,c" becomes
// the YAML list [a,b,c].
struct ShorthandFlag {
  ShorthandFlag(std::string name, std::string key, std::string help, bool list = false)
      : name(std::move(name)), key(std::move(key)), help(std::move(help)), list(list) {}
  std::string name, key, help;
  bool list;
  std::string value;
  CLI::Option* option = nullptr;
};

void add_shorthands(CLI::App& command, std::vector<ShorthandFlag>& flags) {
  for (auto& flag : flags) flag.option = command.add_option(flag.name, flag.value, flag.help);
}

// --set's assignments, then the shorthand flags that were given, as overrides naming their flag.
// A flag given an empty value is refused: it would otherwise silently leave the config's value.
std::vector<training::Override> overrides_from(const std::vector<std::string>& sets,
                                               const std::vector<ShorthandFlag>& flags) {
  std::vector<training::Override> overrides(sets.begin(), sets.end());
  for (const auto& flag : flags) {
    if (flag.option->count() == 0) continue;
    if (flag.value.empty()) {
      throw training::UserError(flag.name + ": expected a value" +
                                (flag.list ? " (a comma-separated list, e.g. 32,64,128)" : "") +
                                ", got an empty string");
    }
    overrides.emplace_back(flag.key + "=" + (flag.list ? "[" + flag.value + "]" : flag.value),
                           flag.name);
  }
  return overrides;
}

// Runs `action`, mapping every error to its one-line message and exit code.
int guarded(const std::function<int()>& action) {
  try {
    return action();
  } catch (const training::OutOfMemory& e) {
    spdlog::error("{}", e.what());
    return kExitOutOfMemory;
  } catch (const training::DistributedError& e) {
    spdlog::error("{}", e.what());
    return kExitDistributed;
  } catch (const training::CannotWrite& e) {
    spdlog::error("{}", e.what());
    return kExitCannotWrite;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path that cannot be used (a loop of symbolic links, a name too long, a folder where a
    // file is expected): the user's to fix, unless the disk is full.
    const int code = e.code().value();
    spdlog::error("{}: {}", e.path1().empty() ? std::string("filesystem") : e.path1().string(),
                  e.code().message());
    return code == ENOSPC || code == EDQUOT || code == EFBIG || code == EIO ? kExitCannotWrite
                                                                            : kExitBadInput;
  } catch (const data::DataError& e) {
    spdlog::error("{}", e.what());
  } catch (const training::UserError& e) {
    spdlog::error("{}", e.what());
  } catch (const c10::Error& e) {
    spdlog::error("LibTorch error: {}", first_line(e.what_without_backtrace()));
    return kExitInternalError;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", first_line(e.what()));
    return kExitInternalError;
  }
  return kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Train ResNet on CIFAR-10 with LibTorch and measure memory and speed.\n"
      "Without a subcommand: train. Subcommands: sweep, report, bench."};
  app.footer(kExamples);
  app.require_subcommand(0, 1);

  training::TrainRequest train;
  std::vector<std::string> train_sets;
  app.add_option("--config", train.config_path, "YAML config file (see configs/)");
  app.add_option("--set", train_sets, "Override one config key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  std::vector<ShorthandFlag> train_flags = {
      {"--device", "training.device", "Training device: auto, cpu, cuda or cuda:N"},
      {"--memory-limit", "memory.limit",
       "Emulate a device with this much memory, e.g. 12GiB (sets memory.limit)"}};
  add_shorthands(app, train_flags);
  app.add_option("--output-dir", train.output_dir,
                 "Run directory to create (default: <output.dir>/<date>-<time>-<arch>)");
  app.add_option("--resume", train.resume, "Continue a run: its directory or a checkpoint file");
  app.add_flag("--print-config", train.print_config, "Print the effective config and exit");

  training::SweepRequest sweep;
  std::vector<std::string> sweep_sets;
  bool find_max = false;
  auto* sweep_command = app.add_subcommand(
      "sweep",
      "Batch-size sweep: memory and speed per batch size, precision, checkpointing and "
      "memory format, each trial in its own process (grid: the config's sweep section)");
  sweep_command->add_option("--config", sweep.config_path, "YAML config file")->required();
  sweep_command->add_option("--set", sweep_sets, "Override one config key (repeatable)")
      ->allow_extra_args(false);
  std::vector<ShorthandFlag> sweep_flags = {
      {"--batch-sizes", "sweep.batch_sizes", "e.g. 32,64,128 (sweep.batch_sizes)", true},
      {"--precisions", "sweep.precisions", "e.g. fp32,bf16,fp16 (sweep.precisions)", true},
      {"--checkpointing", "sweep.checkpointing", "e.g. off,on (sweep.checkpointing)", true},
      {"--memory-formats", "sweep.memory_formats",
       "e.g. contiguous,channels_last (sweep.memory_formats)", true},
      {"--predict-for", "sweep.predict_for",
       "Card sizes to predict the largest batch for, e.g. 12GiB,24GiB,80GiB", true},
      {"--warmup-steps", "sweep.warmup_steps", "Steps before measuring (sweep.warmup_steps)"},
      {"--measure-steps", "sweep.measure_steps", "Measured steps (sweep.measure_steps)"},
      {"--device", "training.device", "auto, cpu, cuda or cuda:N"},
      {"--memory-limit", "memory.limit", "Emulate a card of this size, e.g. 12GiB"}};
  add_shorthands(*sweep_command, sweep_flags);
  sweep_command->add_flag("--find-max", find_max,
                          "Also search the largest batch that fits, per setting");
  sweep_command->add_option("--output-dir", sweep.output_dir, "Sweep directory to create");

  std::string report_dir;
  auto* report_command =
      app.add_subcommand("report", "Write <run>/report.md and its plots for a run directory");
  report_command->add_option("run_dir", report_dir, "The run directory")->required();

  auto* bench_command = app.add_subcommand("bench", "Micro-benchmarks");
  bench_command->require_subcommand(1);
  auto* matmul_command = bench_command->add_subcommand(
      "matmul",
      "Square matrix multiply per device and dtype: time, GFLOP/s, fraction of peak, memory");
  std::string sizes = "4096", devices = "cpu", dtypes = "fp32", matmul_output = "matmul.json";
  std::string matmul_limit;
  int64_t repeats = 5, threads = 0;
  std::vector<std::string> peaks;
  matmul_command->add_option("--size", sizes, "Matrix size N (or a list: 1024,4096)");
  matmul_command->add_option("--devices", devices, "e.g. cpu,cuda");
  matmul_command->add_option("--dtypes", dtypes, "fp64, fp32, bf16, fp16, e.g. fp32,bf16");
  matmul_command->add_option("--repeats", repeats, "Timed repetitions (median reported)");
  matmul_command
      ->add_option("--peak", peaks, "A peak to compare with: device:dtype=GFLOPS (repeatable)")
      ->allow_extra_args(false);
  matmul_command->add_option("--threads", threads, "CPU threads (0 = LibTorch's default)");
  matmul_command->add_option("--memory-limit", matmul_limit,
                             "Emulate a device with this much memory, e.g. 2GiB");
  matmul_command->add_option("--output", matmul_output, "JSON results file");

  std::string trial_config, trial_result;
  auto* trial_command = app.add_subcommand("sweep-trial", "")->group("");  // hidden: run by sweep
  trial_command->add_option("--config", trial_config)->required();
  trial_command->add_option("--result", trial_result)->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }

  training::configure_console_logging();
  // LibTorch's own log lines (c10d's connection retries with backtraces, ...) stay out of the
  // terminal unless asked for with TORCH_CPP_LOG_LEVEL; our one-line errors say what happened.
  if (!std::getenv("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = c10::GLOG_FATAL;
  // With a file-size limit (ulimit -f), writing past it fails with EFBIG and exit code 5 instead
  // of killing the process in the middle of a write.
  std::signal(SIGXFSZ, SIG_IGN);
  // Installed before any tensor exists, so CPU memory accounting sees every allocation.
  training::TrackingCpuAllocator::instance();

  if (*matmul_command) {
    return guarded([&] {
      const auto options =
          training::parse_matmul_options(sizes, devices, dtypes, repeats, peaks, matmul_limit);
      if (threads < 0) throw training::UserError("--threads: expected 0 or more");
      training::set_cpu_threads(threads);
      const auto results = training::run_matmul_bench(options);
      std::printf("%s", training::format_matmul_table(results).c_str());
      training::write_file_atomically(matmul_output, training::matmul_json(results).dump(2) + "\n");
      spdlog::info("results written to {}", matmul_output);
      for (const auto& r : results) {
        if (!r.out_of_memory) continue;
        spdlog::error("bench matmul: {} {} N={} ran out of memory; the other rows are in {}",
                      r.device, r.dtype, r.size, matmul_output);
        return kExitOutOfMemory;
      }
      return kExitOk;
    });
  }
  if (*report_command) {
    return guarded([&] {
      spdlog::info("report: {}", training::write_report(report_dir).string());
      return kExitOk;
    });
  }
  if (*trial_command) {
    return guarded([&] { return training::child_trial_main(trial_config, trial_result); });
  }
  if (*sweep_command) {
    return guarded([&] {
      sweep.overrides = overrides_from(sweep_sets, sweep_flags);
      if (find_max) sweep.overrides.emplace_back("sweep.find_max=true", "--find-max");
      sweep.executable = training::current_executable();
      return training::run_sweep(sweep);
    });
  }
  return guarded([&] {
    train.overrides = overrides_from(train_sets, train_flags);
    return training::run_training(train);
  });
}
