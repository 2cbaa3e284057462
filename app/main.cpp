// `train`: parsing and dispatch only; flags in app/flags.h, set-up and exit codes in app/process.h,
// every behaviour in the libraries.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "app/flags.h"
#include "app/process.h"
#include "training/cards/cards_report.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/run/run_report.h"

namespace {

using app::guarded;
using training::kExitOk;

// Runs the command the arguments name (train itself when none); main runs it inside guarded().
int dispatch(app::Arguments& a, const app::Commands& c) {
  if (*c.convert) {
    if (!a.convert.list && a.convert.output.empty()) {
      throw training::UserError("convert: expected ROOT OUTPUT (or ROOT --list)");
    }
    return training::convert_command(a.convert);
  }
  if (*c.matmul) {
    if (!a.matmul_memory_limit.empty())
      a.matmul.memory_limit = training::size_flag("--memory-limit", a.matmul_memory_limit);
    return training::matmul_command(a.matmul);
  }
  if (*c.loader) {
    a.loader_bench.overrides = a.loader_flags.overrides();
    training::loader_bench_command(a.loader_bench);
    return kExitOk;
  }
  if (*c.compare) {
    training::compare_command(a.compare);
    return kExitOk;
  }
  if (*c.cards) {
    std::cout << training::cards_report(a.cards, a.cards_json);
    return kExitOk;
  }
  if (*c.report) {
    spdlog::info("report: {}", training::report_command(a.report_dir).string());
    return kExitOk;
  }
  if (*c.trial) return training::child_trial_main(a.trial_config, a.trial_result);
  if (*c.plan) {
    app::refuse_small_sweep_flags_with_from(*c.plan);
    a.plan.overrides = a.plan_flags.overrides();
    a.plan.executable = training::current_executable();
    return training::plan_command(app::plan_request(a.plan_values, a.plan));
  }
  if (*c.memory) {
    a.memory.overrides = a.memory_flags.overrides();
    return training::memory_command(a.memory);
  }
  if (*c.sweep) {
    a.sweep.overrides = a.sweep_flags.overrides();
    if (a.find_max) a.sweep.overrides.emplace_back("sweep.find_max=true", "--find-max");
    a.sweep.executable = training::current_executable();
    return training::run_sweep(a.sweep);
  }
  a.train.overrides = a.train_flags.overrides();
  return training::train_command(a.train);
}

}  // namespace

int main(int argc, char** argv) {
  training::set_invoked_as(argc > 0 ? argv[0] : "");  // advice names the program as it was run
  CLI::App cli{
      "Train ResNet on CIFAR-10 with LibTorch and measure memory and speed.\n"
      "Without a subcommand: train. Subcommands: sweep, memory, plan, compare, report, convert, "
      "cards, bench."};
  cli.footer(app::examples());
  cli.require_subcommand(0, 1);
  // One line, as every bad input gets (CLI11's own adds "Run with --help for more information.").
  cli.failure_message(
      [](const CLI::App* app, const CLI::Error& e) { return app::flag_error(*app, e); });
  app::Arguments a;
  const app::Commands commands = app::add_commands(cli, a);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e) == 0 ? kExitOk : training::kExitBadInput;
  }
  app::set_up_process();
  return guarded([&] {
    app::refuse_bad_values(cli);
    return dispatch(a, commands);
  });
}
