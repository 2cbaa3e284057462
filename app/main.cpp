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
#include "training/config/config_yaml.h"
#include "training/convert_command.h"
#include "training/platform/atomic_file.h"
#include "training/platform/device.h"
#include "training/platform/distributed.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/platform/stop_signal.h"
#include "training/run/run_dir.h"
#include "training/run/run_report.h"
#include "training/studies/bench_loader.h"
#include "training/studies/bench_matmul.h"
#include "training/studies/compare_runs.h"
#include "training/studies/memory_report.h"
#include "training/studies/plan.h"
#include "training/studies/sweep.h"
#include "training/train_command.h"

namespace {

using training::first_line;
using training::kExitBadInput;
using training::kExitCannotWrite;
using training::kExitDistributed;
using training::kExitInternalError;
using training::kExitOk;
using training::kExitOutOfMemory;

const char* kExamples = R"(More examples:
  train --config configs/resnet50_cifar10.yaml
  train --config configs/resnet50_cifar10.yaml --device cpu --output-dir runs/rn50-cpu
  train --resume runs/rn50-cpu --set training.epochs=40
  train --config configs/resnet50_cifar10.yaml --set training.precision=bf16 --memory-limit 12GiB
  train sweep --config configs/sweep_cpu.yaml --find-max --memory-limit 2GiB
  train memory --config configs/resnet50_cifar10.yaml --device cpu --batch-size 32
  train plan --memory 12GiB --from runs/20261130-101500-sweep-resnet50
  train report runs/rn50-cpu
  train bench matmul --size 4096 --devices cpu,cuda --dtypes fp32,bf16
  train convert datasets/cifar10 datasets/cifar10-bin  (image folders as binary batches)
  train --config configs/quick_cpu.yaml --print-config
  scripts/launch.py -n 2 build/train --config FILE     (data-parallel, torchrun-style)

Exit codes: 0 done, 1 internal error, 2 bad input (arguments, config, data),
3 out of memory (device or memory.limit), 4 lost contact with the other data-parallel ranks,
5 could not write an output (disk full, quota, file-size limit), 6 training diverged (the loss is
not a number; the epoch is recorded), 130 stopped by Ctrl-C/SIGTERM (train: checkpoint written,
continue with --resume; convert: nothing written).

Start here (copy and paste; about a minute each on a CPU):
  train --config configs/quick_cpu.yaml --output-dir runs/quick-fp32
  train --config configs/quick_cpu.yaml --set training.precision=bf16 --output-dir runs/quick-bf16
  train sweep --config configs/quick_cpu.yaml --batch-sizes 32,64 --output-dir runs/quick-sweep
  train compare runs/quick-fp32 runs/quick-bf16 --output runs/quick-compare)";

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
// (An empty value was refused by refuse_empty_values.)
std::vector<training::Override> overrides_from(const std::vector<std::string>& sets,
                                               const std::vector<ShorthandFlag>& flags) {
  std::vector<training::Override> overrides(sets.begin(), sets.end());
  for (const auto& flag : flags) {
    if (flag.option->count() == 0) continue;
    if (flag.list) training::config_yaml::split_items(flag.value, flag.name);  // refuses "a,"
    overrides.emplace_back(flag.key + "=" + (flag.list ? "[" + flag.value + "]" : flag.value),
                           flag.name);
  }
  return overrides;
}

// An option given an empty value (--output-dir '', --config '') is refused: read as "not given",
// it would silently fall back to the default (a new run folder, the default settings).
void refuse_empty_values(const CLI::App& command) {
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_type_size_max() == 0) continue;  // a flag
    for (const auto& value : option->results()) {
      if (value.empty()) {
        throw training::UserError(option->get_name() + ": expected a value, got an empty string");
      }
    }
  }
  for (const CLI::App* subcommand : command.get_subcommands()) refuse_empty_values(*subcommand);
}

// A message as one line: a newline in it (a file name holding one) is written as \n.
std::string one_line(const std::string& message) {
  std::string line;
  for (const char c : message) {
    if (c == '\n') {
      line += "\\n";
    } else if (c == '\r') {
      line += "\\r";
    } else {
      line += c;
    }
  }
  return line;
}

// Runs `action`, mapping every error to its one-line message and exit code.
int guarded(const std::function<int()>& action) {
  try {
    return action();
  } catch (const training::OutOfMemory& e) {
    spdlog::error("{}", one_line(e.what()));
    return kExitOutOfMemory;
  } catch (const training::DistributedError& e) {
    spdlog::error("{}", one_line(e.what()));
    return kExitDistributed;
  } catch (const training::CannotWrite& e) {
    spdlog::error("{}", one_line(e.what()));
    return kExitCannotWrite;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path that cannot be used (a loop of symbolic links, a name too long, a folder where a
    // file is expected): the user's to fix, unless the disk is full.
    const int code = e.code().value();
    spdlog::error("{}: {}",
                  one_line(e.path1().empty() ? std::string("filesystem") : e.path1().string()),
                  e.code().message());
    return code == ENOSPC || code == EDQUOT || code == EFBIG || code == EIO ? kExitCannotWrite
                                                                            : kExitBadInput;
  } catch (const data::DataError& e) {
    spdlog::error("{}", one_line(e.what()));
  } catch (const training::UserError& e) {
    spdlog::error("{}", one_line(e.what()));
  } catch (const c10::Error& e) {
    spdlog::error("LibTorch error: {}", first_line(e.what_without_backtrace()));
    return kExitInternalError;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", first_line(e.what()));
    return kExitInternalError;
  }
  return kExitBadInput;
}

// Every command's arguments, bound to CLI11 options by the add_* functions below.
struct Arguments {
  training::TrainRequest train;
  std::vector<std::string> train_sets;
  std::vector<ShorthandFlag> train_flags = {
      {"--device", "training.device", "Training device: auto, cpu, cuda or cuda:N"},
      {"--memory-limit", "memory.limit",
       "Emulate a device with this much memory, e.g. 12GiB (sets memory.limit)"}};
  training::SweepRequest sweep;
  std::vector<std::string> sweep_sets;
  std::vector<ShorthandFlag> sweep_flags = {
      {"--batch-sizes", "sweep.batch_sizes", "e.g. 32,64,128 (sweep.batch_sizes)", true},
      {"--precisions", "sweep.precisions", "e.g. fp32,bf16,fp16 (sweep.precisions)", true},
      {"--checkpointing", "sweep.checkpointing",
       "e.g. off,on,auto (sweep.checkpointing; auto chooses blocks for the budget)", true},
      {"--memory-formats", "sweep.memory_formats",
       "e.g. contiguous,channels_last (sweep.memory_formats)", true},
      {"--accumulate-steps", "sweep.accumulate_steps",
       "Micro-batches per optimizer step, e.g. 1,4 (sweep.accumulate_steps)", true},
      {"--predict-for", "sweep.predict_for",
       "Card sizes to predict the largest batch for, e.g. 12GiB,24GiB,80GiB", true},
      {"--warmup-steps", "sweep.warmup_steps", "Steps before measuring (sweep.warmup_steps)"},
      {"--measure-steps", "sweep.measure_steps", "Measured steps (sweep.measure_steps)"},
      {"--device", "training.device", "auto, cpu, cuda or cuda:N"},
      {"--memory-limit", "memory.limit", "Emulate a card of this size, e.g. 12GiB"}};
  bool find_max = false;
  training::PlanRequest plan;
  std::vector<std::string> plan_sets;
  std::vector<ShorthandFlag> plan_flags = {
      {"--device", "training.device", "auto, cpu, cuda or cuda:N (for the small sweep)"},
      {"--batch-sizes", "sweep.batch_sizes", "The small sweep's batch sizes, e.g. 32,64,128",
       true}};
  training::MemoryRequest memory;
  std::vector<std::string> memory_sets;
  std::vector<ShorthandFlag> memory_flags = {
      {"--device", "training.device", "auto, cpu, cuda or cuda:N"},
      {"--batch-size", "training.batch_size", "The step's batch (training.batch_size)"},
      {"--memory-limit", "memory.limit", "Emulate a card of this size, e.g. 12GiB"}};
  std::string report_dir;
  training::CompareRequest compare;
  training::MatmulRequest matmul;
  training::LoaderBenchRequest loader_bench;
  std::vector<std::string> loader_sets;
  training::ConvertRequest convert;
  std::string trial_config, trial_result;
};

// `train` itself (no subcommand).
void add_train_options(CLI::App& app, Arguments& a) {
  app.add_option("--config", a.train.config_path, "YAML config file (see configs/)");
  app.add_option("--set", a.train_sets, "Override one config key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  add_shorthands(app, a.train_flags);
  app.add_option("--output-dir", a.train.output_dir,
                 "Run directory to create (default: <output.dir>/<date>-<time>-<arch>)");
  app.add_option("--resume", a.train.resume, "Continue a run: its directory or a checkpoint file");
  app.add_flag("--print-config", a.train.print_config, "Print the effective config and exit");
}

CLI::App* add_sweep_command(CLI::App& app, Arguments& a) {
  auto* sweep = app.add_subcommand(
      "sweep",
      "Batch-size sweep: memory and speed per batch size, precision, checkpointing and "
      "memory format, each trial in its own process (grid: the config's sweep section)");
  sweep->add_option("--config", a.sweep.config_path, "YAML config file")->required();
  sweep->add_option("--set", a.sweep_sets, "Override one config key (repeatable)")
      ->allow_extra_args(false);
  add_shorthands(*sweep, a.sweep_flags);
  sweep->add_flag("--find-max", a.find_max, "Also search the largest batch that fits, per setting");
  sweep->add_option("--output-dir", a.sweep.output_dir, "Sweep directory to create");
  sweep->add_option("--card", a.sweep.card,
                    "Also predict each trial on this card (a name or a size): predicted columns "
                    "beside the measured ones");
  return sweep;
}

CLI::App* add_memory_command(CLI::App& app, Arguments& a) {
  auto* memory = app.add_subcommand(
      "memory",
      "Where one training step's memory goes: weights, gradients, optimizer state, activations "
      "per block, transients, against the measured peak, per setting; and the step's timeline");
  memory->add_option("--config", a.memory.config_path, "YAML config file")->required();
  memory->add_option("--set", a.memory_sets, "Override one config key (repeatable)")
      ->allow_extra_args(false);
  add_shorthands(*memory, a.memory_flags);
  memory->add_option("--settings", a.memory.settings,
                     "e.g. fp32,bf16,fp32+checkpointing,fp32+checkpointing=auto,"
                     "bf16+checkpointing+channels_last (default: fp32 and bf16, each with and "
                     "without checkpointing)");
  memory->add_option(
      "--output-dir", a.memory.output_dir,
      "Study directory to create (default: <output.dir>/<date>-<time>-memory-<arch>)");
  memory->add_option("--card", a.memory.card,
                     "Also predict each setting on this card: a name (H100-80GB, A100-40GB, "
                     "RTX4090, T4, ...) or its memory (24GiB)");
  memory->add_flag("--card-only", a.memory.card_only,
                   "With --card: predict only, without measuring the step at the batch here");
  return memory;
}

CLI::App* add_plan_command(CLI::App& app, Arguments& a) {
  auto* plan = app.add_subcommand(
      "plan",
      "What to run on a card of a given size: the fastest measured setting whose predicted peak "
      "fits, the runners-up and why each lost, and the --set flags to use");
  plan->add_option("--memory", a.plan.memory, "The card's memory, e.g. 12GiB");
  plan->add_option("--card", a.plan.card,
                   "Or the card by name (H100-80GB, A100-40GB, RTX4090, T4, ...) or size: peaks "
                   "by replaying this machine's allocation stream on it; a sweep of another device "
                   "is ranked by the card's estimated images/s");
  plan->add_option("--json", a.plan.json, "Also write the plan as JSON to this file");
  plan->add_option("--target-batch", a.plan.target_batch,
                   "Images per optimizer step to reach by gradient accumulation, e.g. 1024: per "
                   "setting, the micro-batch x training.accumulate_steps that fits");
  plan->add_option("--from", a.plan.from, "A sweep directory to plan from (train sweep)");
  plan->add_option("--config", a.plan.config_path,
                   "Without --from: the config of a small sweep to run first");
  plan->add_option("--set", a.plan_sets, "Override one config key of that sweep (repeatable)")
      ->allow_extra_args(false);
  add_shorthands(*plan, a.plan_flags);
  plan->add_option("--headroom", a.plan.headroom, "Share of the card kept free (default 10%)");
  plan->add_option("--overhead", a.plan.overhead,
                   "Memory outside the allocator, e.g. 800MiB (default: measured by a CUDA "
                   "sweep, else 1GiB)");
  plan->add_option("--budget", a.plan.budget_seconds,
                   "Seconds after which the small sweep starts no new trial (default 300)");
  plan->add_option("--output-dir", a.plan.output_dir, "The small sweep's directory");
  return plan;
}

// `train plan --from` plans from a sweep already run: a flag that sets up the small sweep it
// would otherwise run first is refused, not ignored.
void refuse_small_sweep_flags_with_from(const CLI::App& plan) {
  if (plan.get_option("--from")->count() == 0) return;
  for (const CLI::Option* option : plan.get_options()) {
    const std::string name = option->get_name();
    if (option->count() == 0 || name == "--from" || name == "--memory" || name == "--card" ||
        name == "--json" || name == "--target-batch" || name == "--headroom" ||
        name == "--overhead" || name == "--help" || name == "--config") {
      continue;
    }
    throw training::UserError(name + ": sets up the small sweep that --from replaces (plan " +
                              "reads the sweep already run); give one of them");
  }
}

CLI::App* add_report_command(CLI::App& app, Arguments& a) {
  auto* report =
      app.add_subcommand("report", "Write <run>/report.md and its plots for a run directory");
  report->add_option("run_dir", a.report_dir, "The run directory")->required();
  return report;
}

CLI::App* add_compare_command(CLI::App& app, Arguments& a) {
  auto* compare = app.add_subcommand(
      "compare",
      "Finished runs side by side: what differs in their configs, accuracy, time, images/s, "
      "memory peaks, waiting for data; compare.md, compare.json and overlaid curves");
  compare->add_option("run_dirs", a.compare.run_dirs, "One or more run directories")->required();
  compare->add_option("--output", a.compare.output_dir,
                      "Directory for the comparison (default: runs/<date>-<time>-compare)");
  return compare;
}

CLI::App* add_loader_command(CLI::App& bench, Arguments& a) {
  auto* loader = bench.add_subcommand(
      "loader", "The input pipeline alone: the configured training loader's images/s");
  loader->add_option("--config", a.loader_bench.config_path, "YAML config file")->required();
  loader->add_option("--set", a.loader_sets, "Override one config key (repeatable)")
      ->allow_extra_args(false);
  loader->add_option("--batches", a.loader_bench.batches, "Batches to time (default 200)");
  loader->add_option("--output", a.loader_bench.output, "JSON result file");
  return loader;
}

CLI::App* add_matmul_command(CLI::App& bench, Arguments& a) {
  auto* matmul = bench.add_subcommand(
      "matmul",
      "Square matrix multiply per device and dtype: time, GFLOP/s, fraction of peak, memory");
  auto& m = a.matmul;
  matmul->add_option("--size", m.sizes, "Matrix size N (or a list: 1024,4096)");
  matmul->add_option("--devices", m.devices, "e.g. cpu,cuda");
  matmul->add_option("--dtypes", m.dtypes, "fp64, fp32, bf16, fp16, e.g. fp32,bf16");
  matmul->add_option("--repeats", m.repeats, "Timed repetitions (median reported)");
  matmul->add_option("--peak", m.peaks, "A peak to compare with: device:dtype=GFLOPS (repeatable)")
      ->allow_extra_args(false);
  matmul->add_option("--threads", m.threads, "CPU threads (0 = LibTorch's default)");
  matmul->add_option("--memory-limit", m.memory_limit,
                     "Emulate a device with this much memory, e.g. 2GiB");
  matmul->add_option("--output", m.output, "JSON results file");
  return matmul;
}

CLI::App* add_convert_command(CLI::App& app, Arguments& a) {
  auto* convert = app.add_subcommand(
      "convert",
      "Write image folders (ROOT/train/<class>/, ROOT/test/<class>/) as CIFAR-10 binary batches, "
      "read exactly as train reads them");
  convert->add_option("root", a.convert.root, "The data root holding train/ and test/")->required();
  auto* output = convert->add_option(
      "output", a.convert.output,
      "The folder to create (data_batch_1..5.bin, test_batch.bin, batches.meta.txt)");
  convert
      ->add_flag("--list", a.convert.list,
                 "Print the images train reads, in its order, one JSON line each (split, "
                 "label, class, file), and convert nothing")
      ->excludes(output);
  return convert;
}

// Process-wide set-up once the arguments are valid: logging, LibTorch's log level, signals, the
// CPU memory accounting.
void set_up_process() {
  training::configure_console_logging();
  // LibTorch's own log lines (c10d's connection retries with backtraces, ...) stay out of the
  // terminal unless asked for with TORCH_CPP_LOG_LEVEL; our one-line errors say what happened.
  if (!std::getenv("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = c10::GLOG_FATAL;
  // With a file-size limit (ulimit -f), writing past it fails with EFBIG and exit code 5 instead
  // of killing the process in the middle of a write.
  std::signal(SIGXFSZ, SIG_IGN);
  // Installed before any tensor exists, so CPU memory accounting sees every allocation.
  training::TrackingCpuAllocator::instance();
}

}  // namespace

// A stop before a command can stop gracefully exits with 130, from the first instruction on: the
// dynamic loader runs .preinit_array before any library's initialisers (LibTorch's take a
// noticeable time), so only the loading itself is left to the default action.
extern "C" void train_preinit(int, char**, char**) {
  training::install_exit_on_stop();
}
__attribute__((section(".preinit_array"),
               used)) static void (*const kPreinit)(int, char**, char**) = train_preinit;

int main(int argc, char** argv) {
  CLI::App app{
      "Train ResNet on CIFAR-10 with LibTorch and measure memory and speed.\n"
      "Without a subcommand: train. Subcommands: sweep, memory, plan, compare, report, convert, "
      "bench."};
  app.footer(kExamples);
  app.require_subcommand(0, 1);
  // One line, as every bad input gets (CLI11's own adds "Run with --help for more information.").
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string(e.what()) + " (train --help lists the flags)\n";
  });
  Arguments a;
  add_train_options(app, a);
  auto* sweep = add_sweep_command(app, a);
  auto* memory = add_memory_command(app, a);
  auto* plan = add_plan_command(app, a);
  auto* report = add_report_command(app, a);
  auto* compare = add_compare_command(app, a);
  auto* convert = add_convert_command(app, a);
  auto* bench = app.add_subcommand("bench", "Micro-benchmarks");
  bench->require_subcommand(1);
  auto* matmul = add_matmul_command(*bench, a);
  auto* loader = add_loader_command(*bench, a);
  auto* trial = app.add_subcommand("sweep-trial", "")->group("");  // hidden: run by sweep
  trial->add_option("--config", a.trial_config)->required();
  trial->add_option("--result", a.trial_result)->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitBadInput;
  }
  set_up_process();
  const int given = guarded([&] {
    refuse_empty_values(app);
    return kExitOk;
  });
  if (given != kExitOk) return given;

  if (*convert) {
    return guarded([&] {
      if (!a.convert.list && a.convert.output.empty()) {
        throw training::UserError("convert: expected ROOT OUTPUT (or ROOT --list)");
      }
      return training::convert_command(a.convert);
    });
  }
  if (*matmul) return guarded([&] { return training::matmul_command(a.matmul); });
  if (*loader) {
    return guarded([&] {
      a.loader_bench.overrides.assign(a.loader_sets.begin(), a.loader_sets.end());
      training::loader_bench_command(a.loader_bench);
      return kExitOk;
    });
  }
  if (*compare) {
    return guarded([&] {
      training::compare_command(a.compare);
      return kExitOk;
    });
  }
  if (*report) {
    return guarded([&] {
      spdlog::info("report: {}", training::report_command(a.report_dir).string());
      return kExitOk;
    });
  }
  if (*trial)
    return guarded([&] { return training::child_trial_main(a.trial_config, a.trial_result); });
  if (*plan) {
    return guarded([&] {
      refuse_small_sweep_flags_with_from(*plan);
      a.plan.overrides = overrides_from(a.plan_sets, a.plan_flags);
      a.plan.executable = training::current_executable();
      return training::plan_command(a.plan);
    });
  }
  if (*memory) {
    return guarded([&] {
      a.memory.overrides = overrides_from(a.memory_sets, a.memory_flags);
      return training::memory_command(a.memory);
    });
  }
  if (*sweep) {
    return guarded([&] {
      a.sweep.overrides = overrides_from(a.sweep_sets, a.sweep_flags);
      if (a.find_max) a.sweep.overrides.emplace_back("sweep.find_max=true", "--find-max");
      a.sweep.executable = training::current_executable();
      return training::run_sweep(a.sweep);
    });
  }
  return guarded([&] {
    a.train.overrides = overrides_from(a.train_sets, a.train_flags);
    return training::train_command(a.train);
  });
}
