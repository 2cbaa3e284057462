#include "app/flags.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "build_config.h"
#include "training/config/config_yaml.h"
#include "training/platform/errors.h"
#include "training/platform/process.h"

namespace app {

namespace fs = std::filesystem;

namespace {

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
  scripts/launch.py -n 2 train --config FILE     (data-parallel, torchrun-style)

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

}  // namespace

std::string examples() {
  // The program as it was run and the project's own configs: the examples run as pasted.
  const std::string configs =
      training::shell_word((fs::path(TRAIN_SCRIPTS_DIR).parent_path() / "configs").string());
  const std::string program = training::advised_program();
  const std::pair<std::string, std::string> words[] = {
      {"\n  train ", "\n  " + program + " "},
      {" 2 train ", " 2 " + program + " "},
      {"configs/", configs + "/"},
      {"scripts/", training::shell_word(TRAIN_SCRIPTS_DIR) + "/"}};
  // One pass from left to right: what is put in is not read again (a path holding "scripts/").
  const std::string from = kExamples;
  std::string text;
  for (size_t at = 0; at < from.size();) {
    const auto word = std::find_if(std::begin(words), std::end(words), [&](const auto& w) {
      return from.compare(at, w.first.size(), w.first) == 0;
    });
    if (word == std::end(words)) {
      text += from[at++];
    } else {
      text += word->second;
      at += word->first.size();
    }
  }
  return text;
}

std::vector<training::Override> ConfigFlags::overrides() const {
  std::vector<training::Override> overrides(sets.begin(), sets.end());
  for (const auto& flag : shorthands) {
    if (flag.option->count() == 0) continue;
    // The value as one scalar (a list's items each one), quoted where YAML would read more into
    // it: `--batch-sizes '8]#,16'` was the list [8], `--memory-limit '1GiB #x'` 1GiB.
    YAML::Node value(flag.value);
    if (flag.list) {
      value = YAML::Node(YAML::NodeType::Sequence);
      for (const auto& item : training::config_yaml::split_items(flag.value, flag.name))
        value.push_back(item);  // split_items refuses "a,"
    }
    overrides.emplace_back(flag.key + "=" + training::config_yaml::flow_text(value), flag.name);
  }
  return overrides;
}

CLI::Option* add_config_flags(CLI::App& command, std::string& config_path, ConfigFlags& flags,
                              const std::string& config_help, const std::string& set_help) {
  auto* config = command.add_option("--config", config_path, config_help);
  command.add_option("--set", flags.sets, set_help)->allow_extra_args(false);
  for (auto& flag : flags.shorthands) {
    flag.option = command.add_option(flag.name, flag.value, flag.help);
  }
  return config;
}

namespace {

// The option named `name` ("--budget") in `app` or any of its subcommands; null if none.
const CLI::Option* find_flag(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->check_name(name)) return option;
  }
  for (const CLI::App* subcommand : app.get_subcommands({})) {
    if (const CLI::Option* found = find_flag(*subcommand, name)) return found;
  }
  return nullptr;
}

// A flag given once: given twice it is refused (one line, exit 2), as a valued flag is.
CLI::Option* once(CLI::Option* flag) {
  return flag->multi_option_policy(CLI::MultiOptionPolicy::Throw);
}

// `train` itself (no subcommand).
void add_train_options(CLI::App& app, Arguments& a) {
  add_config_flags(app, a.train.config_path, a.train_flags, "YAML config file (see configs/)");
  app.add_option("--output-dir", a.train.output_dir,
                 "Run directory to create (default: <output.dir>/<date>-<time>-<arch>)");
  app.add_option("--resume", a.train.resume, "Continue a run: its directory or a checkpoint file");
  once(app.add_flag("--print-config", a.train.print_config, "Print the effective config and exit"));
}

CLI::App* add_sweep_command(CLI::App& app, Arguments& a) {
  auto* sweep = app.add_subcommand(
      "sweep",
      "Batch-size sweep: memory and speed per batch size, precision, checkpointing and "
      "memory format, each trial in its own process (grid: the config's sweep section)");
  add_config_flags(*sweep, a.sweep.config_path, a.sweep_flags, "YAML config file")->required();
  once(sweep->add_flag("--find-max", a.find_max,
                       "Also search the largest batch that fits, per setting"));
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
  add_config_flags(*memory, a.memory.config_path, a.memory_flags, "YAML config file")->required();
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
  once(memory->add_flag("--card-only", a.memory.card_only,
                        "With --card: predict only, without measuring the step at the batch here"));
  memory->add_option("--snapshot", a.memory.snapshot,
                     "With --card: write the card's predicted allocator (segments, blocks, events "
                     "over the step) to this file in PyTorch's memory-snapshot format, for its "
                     "viewer (`-m torch.cuda._memory_viz trace_plot FILE -o FILE.html` in a "
                     "Python with torch: the log names this build's; several settings: one file "
                     "each, the setting's name before the extension)");
  return memory;
}

CLI::App* add_plan_command(CLI::App& app, Arguments& a) {
  auto* plan = app.add_subcommand(
      "plan",
      "What to run on a card of a given size: the fastest measured setting whose predicted peak "
      "fits, the runners-up and why each lost, and the --set flags to use");
  plan->add_option("--memory", a.plan_values.memory, "The card's memory, e.g. 12GiB");
  plan->add_option("--card", a.plan_values.card,
                   "Or the card by name (H100-80GB, A100-40GB, RTX4090, T4, ...) or size: peaks "
                   "by replaying this machine's allocation stream on it; a sweep of another device "
                   "is ranked by a named card's estimated images/s (a size: by memory)");
  plan->add_option("--json", a.plan.json, "Also write the plan as JSON to this file");
  plan->add_option("--target-batch", a.plan_values.target_batch,
                   "Images per optimizer step to reach by gradient accumulation, e.g. 1024: per "
                   "setting, the micro-batch x training.accumulate_steps that fits")
      ->type_name("INT");  // read as text: 0 is refused, not "none" (app/flag_values.h)
  plan->add_option("--from", a.plan.from, "A sweep directory to plan from (train sweep)");
  add_config_flags(*plan, a.plan.config_path, a.plan_flags,
                   "Without --from: the config of a small sweep to run first",
                   "Override one config key of that sweep (repeatable)");
  plan->add_option("--headroom", a.plan_values.headroom,
                   "Share of the card kept free (default 10%)");
  plan->add_option("--overhead", a.plan_values.overhead,
                   "Memory outside the allocator, e.g. 800MiB (default: measured by a CUDA "
                   "sweep, else the 771MiB measured on an H200)");
  plan->add_option("--budget", a.plan.budget_seconds,
                   "Seconds after which the small sweep starts no new trial (default 300)");
  plan->add_option("--output-dir", a.plan.output_dir, "The small sweep's directory");
  return plan;
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

CLI::App* add_cards_command(CLI::App& app, Arguments& a) {
  auto* cards = app.add_subcommand(
      "cards", "The cards --card knows (data sheets) and the speed model's fit, as markdown");
  cards
      ->add_option("--card", a.cards,
                   "Only this card, found as --card finds it everywhere (a name, or a size); "
                   "repeatable")
      ->allow_extra_args(false);
  once(cards->add_flag("--json", a.cards_json,
                       "The cards as JSON (no speed model) instead of markdown"));
  return cards;
}

CLI::App* add_loader_command(CLI::App& bench, Arguments& a) {
  auto* loader = bench.add_subcommand(
      "loader", "The input pipeline alone: the configured training loader's images/s");
  add_config_flags(*loader, a.loader_bench.config_path, a.loader_flags, "YAML config file")
      ->required();
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
  matmul->add_option("--memory-limit", a.matmul_memory_limit,
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
  once(convert->add_flag("--list", a.convert.list,
                         "Print the images train reads, in its order, one JSON line each (split, "
                         "label, class, file), and convert nothing"))
      ->excludes(output);
  return convert;
}

}  // namespace

std::string flag_error(const CLI::App& app, const CLI::Error& error) {
  std::string what = error.what();
  // CLI11 checks required flags before it reports arguments it does not know: the unknown one is
  // the mistake ("train sweep --confg F" is not "--config is required").
  if (const auto extras = app.remaining(/*recurse=*/true);
      error.get_name() == "RequiredError" && !extras.empty()) {
    what = CLI::ExtrasError(extras).what();
  }
  const std::string prefix = "Could not convert: ", separator = " = ";
  const size_t equals = what.find(separator);
  if (what.rfind(prefix, 0) == 0 && equals != std::string::npos) {
    const std::string name = what.substr(prefix.size(), equals - prefix.size());
    const std::string value = what.substr(equals + separator.size());
    const CLI::Option* flag = find_flag(app, name);
    const std::string type = flag ? flag->get_type_name() : "";
    const std::string expected = type == "INT"     ? "a whole number"
                                 : type == "UINT"  ? "a whole number, 0 or more"
                                 : type == "FLOAT" ? "a number"
                                 : flag && type.empty()
                                     ? "nothing, or true or false after '='"  // an on/off flag
                                     : "";
    // Only blanks is nothing, as for every flag (the line is made one line below).
    if (!expected.empty())
      what = name + ": expected " +
             (training::blank(value) ? "a value, got only blanks"
                                     : expected + ", got '" + value + "'");
  }
  std::string command = training::advised_program();  // with the (sub)command whose flags they are
  for (const CLI::App* at = &app; !at->get_subcommands().empty(); at = at->get_subcommands()[0])
    command += " " + at->get_subcommands()[0]->get_name();
  return "[error] " + training::one_line(what) + " (" + command + " --help lists the flags)\n";
}

void refuse_bad_values(const CLI::App& command) {
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_type_size_max() == 0) continue;  // a flag
    for (const auto& value : option->results()) {
      if (value.empty()) {
        throw training::UserError(option->get_name() + ": expected a value, got an empty string");
      }
      // One of only blanks is nothing too (`compare --output ' '` made a folder named " ").
      if (training::blank(value))
        throw training::UserError(option->get_name() + ": expected a value, got only blanks");
      // A path or name with a line break or tab breaks every line and command naming it (--set's
      // values are the config's to judge).
      const std::string name = option->get_name();
      if (name != "--set" && training::has_control_character(value)) {
        throw training::UserError(name +
                                  ": expected a value without control characters (a line "
                                  "break, a tab), got '" +
                                  training::one_line(value) + "'");
      }
      // What is written under a name a listing shows as another's (" runs" as "runs").
      if ((name == "--output-dir" || name == "--output" || name == "--json" ||
           name == "--snapshot" || (name == "output" && command.get_name() == "convert")) &&
          training::blank_at_an_end(value)) {
        throw training::UserError(
            name +
            ": expected a path whose every part starts and ends with a visible "
            "character, got '" +
            training::blanks_shown(value) + "'");
      }
    }
  }
  for (const CLI::App* subcommand : command.get_subcommands()) refuse_bad_values(*subcommand);
}

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

namespace {

// A number's or an on/off flag's value without the spaces around it, as a size flag's is read
// (CLI11 refused `--budget '300 '` and took `--budget ' 300'`); a tab or line break stays, for
// refuse_bad_values to refuse, and so does a value of only spaces.
void trim_number_values(CLI::App& command) {
  for (CLI::Option* option : command.get_options()) {
    const std::string type = option->get_type_name();
    if (type == "INT" || type == "UINT" || type == "FLOAT" || type.empty()) {  // "": on/off
      option->transform([](std::string value) {
        const size_t first = value.find_first_not_of(' ');
        return first == std::string::npos
                   ? value
                   : value.erase(value.find_last_not_of(' ') + 1).substr(first);
      });
    }
  }
  for (CLI::App* subcommand : command.get_subcommands({})) trim_number_values(*subcommand);
}

}  // namespace

Commands add_commands(CLI::App& app, Arguments& a) {
  Commands c{};
  add_train_options(app, a);
  c.sweep = add_sweep_command(app, a);
  c.memory = add_memory_command(app, a);
  c.plan = add_plan_command(app, a);
  c.report = add_report_command(app, a);
  c.compare = add_compare_command(app, a);
  c.convert = add_convert_command(app, a);
  c.cards = add_cards_command(app, a);
  auto* bench = app.add_subcommand("bench", "Micro-benchmarks");
  bench->require_subcommand(1);
  c.matmul = add_matmul_command(*bench, a);
  c.loader = add_loader_command(*bench, a);
  c.trial = app.add_subcommand("sweep-trial", "")->group("");  // hidden: run by sweep
  c.trial->add_option("--config", a.trial_config)->required();
  c.trial->add_option("--result", a.trial_result)->required();
  trim_number_values(app);
  return c;
}

}  // namespace app
