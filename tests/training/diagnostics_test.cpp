// The trainer's time split, its verdicts, the profiler window and the run report, on the CPU.
#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "training/report.h"
#include "training/trainer.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

training::Config tiny(const std::string& extra) {
  return training::parse_config(R"(
model: {arch: resnet18, stem: imagenet}
data: {source: synthetic, synthetic_train_size: 128, synthetic_test_size: 32, prefetch: 0}
training: {device: cpu, epochs: 1, batch_size: 16, log_every_steps: 4}
monitor: {sample_period: 0.1}
)" + extra,
                                "tiny");
}

std::vector<ordered_json> train(const training::Config& config, const fs::path& dir) {
  training::RunDirectory run(dir, false);
  run.write_config(training::to_yaml(config));
  auto options = config.data.dataset;
  training::Trainer trainer(config, torch::kCPU, data::load_split(options, data::SplitName::Train),
                            data::load_split(options, data::SplitName::Test));
  trainer.write_to(run);
  trainer.fit();
  std::vector<ordered_json> rows;
  for (const auto& record : run.epochs()) rows.push_back(training::to_json(record));
  return rows;
}

TEST(Diagnostics, ASlowInputPipelineIsMeasuredAndNamed) {
  test_support::TempDir dir;
  const auto fast = train(tiny(""), dir / "fast");
  EXPECT_LT(fast.at(0).at("data_wait_fraction").get<double>(), 0.10);
  EXPECT_EQ(test_support::read_text(dir / "fast/train.log").find("input pipeline:"),
            std::string::npos);

  // A delay per batch of three times this machine's own step time, prepared inline: the loop
  // must then wait for data about 3/4 of the epoch, on a fast CPU or a slow one.
  const double step_seconds = fast.at(0).at("compute_seconds").get<double>() / 8;
  auto config = tiny("");
  config.data.simulated_delay_ms = std::max(20.0, 3000 * step_seconds);
  const auto rows = train(config, dir / "slow");
  EXPECT_GT(rows.at(0).at("data_wait_fraction").get<double>(), 0.5);
  // Sleeping takes at least as long as asked: 8 batches of the delay, at least.
  EXPECT_GE(rows.at(0).at("data_seconds").get<double>(),
            8 * config.data.simulated_delay_ms / 1000.0);
  EXPECT_NEAR(
      rows.at(0).at("data_seconds").get<double>() + rows.at(0).at("compute_seconds").get<double>(),
      rows.at(0).at("epoch_seconds").get<double>(), 1e-9);
  EXPECT_NE(test_support::read_text(dir / "slow/train.log")
                .find("input pipeline: the loop waited for data"),
            std::string::npos);
}

TEST(Diagnostics, SamplerFillsGpuJsonlAndTheEpochColumns) {
  test_support::TempDir dir;
  const auto rows = train(tiny(""), dir / "run");
  const auto& row = rows.at(0);
  EXPECT_GT(row.at("utilization_mean").get<double>(), 0.0);
  EXPECT_GT(row.at("memory_used_max_bytes").get<int64_t>(), 100 << 20);
  std::ifstream samples(dir / "run/gpu.jsonl");
  int lines = 0;
  for (std::string line; std::getline(samples, line); ++lines) {
    EXPECT_EQ(nlohmann::json::parse(line).at("device"), "cpu");
  }
  EXPECT_GE(lines, 2);
}

TEST(Diagnostics, NoSamplingMeansNoFileAndEmptyColumns) {
  test_support::TempDir dir;
  auto config = tiny("");
  config.monitor.sample_period = 0;
  const auto off = train(config, dir / "off");
  EXPECT_FALSE(fs::exists(dir / "off/gpu.jsonl"));
  EXPECT_TRUE(off.at(0).at("utilization_mean").is_null());
}

TEST(Diagnostics, ProfilerTracesTheStepWindowAndLogsTheTopOperators) {
  test_support::TempDir dir;
  auto config = tiny("profiler: {enabled: true, steps: [2, 3], top: 5}\n");
  train(config, dir / "run");
  std::ifstream in(dir / "run/trace.json");
  const auto trace = nlohmann::json::parse(in);  // valid JSON, or this throws
  std::set<std::string> steps;
  int64_t ops = 0;
  for (const auto& event : trace.at("traceEvents")) {
    const auto name = event.value("name", std::string());
    if (name.rfind("ProfilerStep#", 0) == 0) steps.insert(name);
    if (name.rfind("aten::", 0) == 0) ++ops;
  }
  EXPECT_EQ(steps, (std::set<std::string>{"ProfilerStep#2", "ProfilerStep#3"}));
  EXPECT_GT(ops, 100);
  const auto log = test_support::read_text(dir / "run/train.log");
  EXPECT_NE(log.find("profiler: steps 2..3 traced to"), std::string::npos);
  EXPECT_NE(log.find("top 5 by self time:"), std::string::npos);
  EXPECT_NE(log.find("aten::convolution_backward"), std::string::npos);
}

// The loader's background thread gathers and augments batches: its ops belong in the trace.
TEST(Diagnostics, ProfilerTracesTheLoaderThreadToo) {
  test_support::TempDir dir;
  auto config = tiny("profiler: {enabled: true, steps: [2, 4], top: 5}\n");
  config.data.prefetch = 2;
  train(config, dir / "run");
  std::ifstream in(dir / "run/trace.json");
  const auto trace = nlohmann::json::parse(in);
  std::set<int64_t> gather_threads, model_threads;
  for (const auto& event : trace.at("traceEvents")) {
    const auto name = event.value("name", std::string());
    if (name == "aten::index_select") gather_threads.insert(event.value("tid", int64_t{-1}));
    if (name == "aten::convolution") model_threads.insert(event.value("tid", int64_t{-1}));
  }
  ASSERT_FALSE(gather_threads.empty()) << "no loader op in the trace";
  ASSERT_FALSE(model_threads.empty());
  // Gathered on a thread of its own, not the training thread.
  EXPECT_EQ(gather_threads.count(*model_threads.begin()), 0u);
}

TEST(Diagnostics, ProfilerWindowMustBeOrdered) {
  EXPECT_THROW(tiny("profiler: {steps: [5, 2]}\n"), training::ConfigError);
  EXPECT_THROW(tiny("profiler: {steps: [5]}\n"), training::ConfigError);
}

TEST(Report, SummarisesTheRunWithPlots) {
  test_support::TempDir dir;
  auto config = tiny("");
  config.training.epochs = 2;
  train(config, dir / "run");
  const auto report = training::write_report(dir / "run");
  const auto text = test_support::read_text(report);
  for (const char* part :
       {"# Run report: run", "## Setup", "| model | resnet18, imagenet stem", "## Results",
        "| final test accuracy |", "| waiting for data |", "**Verdict: compute-bound.**",
        "## Epochs", "| 2 | 16 |", "![loss and accuracy](loss_accuracy.png)"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
  for (const char* png : {"loss_accuracy.png", "throughput.png", "memory.png"}) {
    std::ifstream in(dir / "run" / png, std::ios::binary);
    char signature[4] = {};
    in.read(signature, 4);
    EXPECT_EQ(std::string(signature + 1, 3), "PNG") << png;
    EXPECT_GT(fs::file_size(dir / "run" / png), 5000u) << png;
  }
}

TEST(Report, RefusesAFolderWithoutARun) {
  test_support::TempDir dir;
  EXPECT_THROW(training::write_report(dir.path()), training::UserError);
}

}  // namespace
