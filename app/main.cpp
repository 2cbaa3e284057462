// `train`: command-line parsing and dispatch only. Every behaviour lives in the libraries.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include "data/split.h"
#include "training/errors.h"
#include "training/run.h"
#include "training/run_dir.h"

namespace {

constexpr int kExitBadInput = 2;

const char* kExamples = R"(Examples:
  train --config configs/resnet50_cifar10.yaml
  train --config configs/quick_cpu.yaml --set training.epochs=2 --set data.train_limit=5000
  train --config configs/resnet50_cifar10.yaml --device cpu --output-dir runs/rn50-cpu
  train --resume runs/rn50-cpu --set training.epochs=40
  train --config configs/quick_cpu.yaml --print-config

Exit codes: 0 done, 1 internal error, 2 bad input (arguments, config, data),
130 stopped by Ctrl-C/SIGTERM (checkpoint written; continue with --resume).)";

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train ResNet on CIFAR-10 with LibTorch and measure memory and speed."};
  app.footer(kExamples);
  training::TrainRequest request;
  app.add_option("--config", request.config_path, "YAML config file (see configs/)");
  app.add_option("--set", request.overrides, "Override one config key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--device", request.device, "Training device: auto, cpu, cuda or cuda:N");
  app.add_option("--output-dir", request.output_dir,
                 "Run directory to create (default: <output.dir>/<date>-<time>-<arch>)");
  app.add_option("--resume", request.resume, "Continue a run: its directory or a checkpoint file");
  app.add_flag("--print-config", request.print_config, "Print the effective config and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitBadInput;
  }

  training::configure_console_logging();
  try {
    return training::run_training(request);
  } catch (const data::DataError& e) {
    spdlog::error("{}", e.what());
  } catch (const training::UserError& e) {
    spdlog::error("{}", e.what());
  } catch (const c10::Error& e) {
    spdlog::error("LibTorch error: {}", first_line(e.what_without_backtrace()));
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", first_line(e.what()));
    return 1;
  }
  return kExitBadInput;
}
