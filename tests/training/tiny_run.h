// A tiny training run for the tests of the trainer's measurements, the profiler and the report:
// ResNet-18 (ImageNet stem) on 128 synthetic images, one epoch of 8 steps, on the CPU.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "test_support.h"
#include "training/config/config.h"
#include "training/loop/trainer.h"
#include "training/run/run_dir.h"

namespace tiny_run {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// The tiny config, plus `extra` YAML.
inline training::Config tiny(const std::string& extra) {
  return training::parse_config(R"(
model: {arch: resnet18, stem: imagenet}
data: {source: synthetic, synthetic_train_size: 128, synthetic_test_size: 32, prefetch: 0}
training: {device: cpu, epochs: 1, batch_size: 16, log_every_steps: 4}
monitor: {sample_period: 0.1}
)" + extra,
                                "tiny");
}

// Trains `config` in a new run directory `dir`; the epochs' rows as JSON.
inline std::vector<ordered_json> train(const training::Config& config, const fs::path& dir) {
  training::RunDirectory run(dir, false);
  run.write_inputs({training::to_yaml(config), "{}\n"});
  auto options = config.data.dataset;
  training::Trainer trainer(config, torch::kCPU, data::load_split(options, data::SplitName::Train),
                            data::load_split(options, data::SplitName::Test));
  trainer.write_to(run);
  trainer.fit();
  std::vector<ordered_json> rows;
  for (const auto& record : run.epochs()) rows.push_back(training::to_json(record));
  return rows;
}

}  // namespace tiny_run
