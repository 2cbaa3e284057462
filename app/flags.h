// The command line: every command's flags bound to CLI11 options, and the one place where flags
// become config overrides (ConfigFlags). app/main.cpp parses with them and dispatches.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "app/flag_values.h"
#include "training/bench/bench_loader.h"
#include "training/bench/bench_matmul.h"
#include "training/config/config_input.h"
#include "training/convert_command.h"
#include "training/run/compare_runs.h"
#include "training/studies/memory_report.h"
#include "training/studies/plan.h"
#include "training/studies/sweep.h"
#include "training/train_command.h"

namespace app {

// The examples, the exit codes and the first commands: `train --help`'s footer, naming the
// program as it was run and the project's configs folder, so that they run as pasted.
std::string examples();

// A flag that is shorthand for one config key (--device sets training.device), for `train` and
// `train sweep` alike. A list flag's "a,b,c" becomes the YAML list [a,b,c].
struct ShorthandFlag {
  ShorthandFlag(std::string name, std::string key, std::string help, bool list = false)
      : name(std::move(name)), key(std::move(key)), help(std::move(help)), list(list) {}
  std::string name, key, help;
  bool list;
  std::string value;
  CLI::Option* option = nullptr;
};

// A command's config flags: --set's assignments and its shorthand flags, declared once for every
// command that reads a config (add_config_flags).
struct ConfigFlags {
  std::vector<std::string> sets;
  std::vector<ShorthandFlag> shorthands;
  // --set's assignments, then the shorthand flags that were given, as overrides naming their
  // flag. (An empty value was refused by refuse_bad_values.)
  std::vector<training::Override> overrides() const;
};

// --config (bound to `config_path`), --set and `flags`' shorthands on `command`; returns --config.
CLI::Option* add_config_flags(CLI::App& command, std::string& config_path, ConfigFlags& flags,
                              const std::string& config_help,
                              const std::string& set_help =
                                  "Override one config key: "
                                  "section.key=value (repeatable)");

// A parse error as every bad input's one line: "[error] ", CLI11's message, what a value's flag
// takes ("a whole number"), then "(train --help lists the flags)".
std::string flag_error(const CLI::App& app, const CLI::Error& error);

// Every command's arguments, bound to CLI11 options by the add_* functions below.
struct Arguments {
  training::TrainRequest train;
  ConfigFlags train_flags{
      {},
      {{"--device", "training.device", "Training device: auto, cpu, cuda or cuda:N"},
       {"--memory-limit", "memory.limit",
        "Emulate a device with this much memory, e.g. 12GiB (sets memory.limit)"}}};
  training::SweepRequest sweep;
  ConfigFlags sweep_flags{
      {},
      {{"--batch-sizes", "sweep.batch_sizes", "e.g. 32,64,128 (sweep.batch_sizes)", true},
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
       {"--memory-limit", "memory.limit", "Emulate a card of this size, e.g. 12GiB"},
       {"--launcher", "sweep.launcher",
        "local (child processes here) or slurm (one job array; sweep.slurm.options)"},
       {"--gpus", "sweep.devices", "GPUs to run trials on, one trial per GPU, e.g. 0,1,2,3",
        true}}};
  bool find_max = false;
  training::PlanRequest plan;
  PlanFlags plan_values;
  ConfigFlags plan_flags{
      {},
      {{"--device", "training.device", "auto, cpu, cuda or cuda:N (for the small sweep)"},
       {"--batch-sizes", "sweep.batch_sizes", "The small sweep's batch sizes, e.g. 32,64,128",
        true}}};
  training::MemoryRequest memory;
  ConfigFlags memory_flags{
      {},
      {{"--device", "training.device", "auto, cpu, cuda or cuda:N"},
       {"--batch-size", "training.batch_size", "The step's batch (training.batch_size)"},
       {"--memory-limit", "memory.limit", "Emulate a card of this size, e.g. 12GiB"}}};
  std::string report_dir;
  training::CompareRequest compare;
  training::MatmulRequest matmul;
  std::string matmul_memory_limit;
  training::LoaderBenchRequest loader_bench;
  ConfigFlags loader_flags;
  training::ConvertRequest convert;
  std::vector<std::string> cards;  // train cards --card NAME...
  bool cards_json = false;
  std::string trial_config, trial_result;
};

// The subcommands, as added to the app.
struct Commands {
  CLI::App *sweep, *memory, *plan, *report, *compare, *convert, *cards, *matmul, *loader, *trial;
};
Commands add_commands(CLI::App& app, Arguments& a);

// An empty value (--output-dir '', --config ''), which CLI11 reads as "not given" (the default),
// refused naming the flag (UserError).
void refuse_bad_values(const CLI::App& command);

// `train plan --from` plans from a sweep already run: a flag that sets up the small sweep it
// would otherwise run first is refused, not ignored.
void refuse_small_sweep_flags_with_from(const CLI::App& plan);

}  // namespace app
