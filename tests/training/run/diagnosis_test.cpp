// The trainer's time split and sampler columns, and the diagnosis they give, on the CPU.
#include "training/run/diagnosis.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "training/tiny_run.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using tiny_run::tiny;
using tiny_run::train;

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

TEST(Diagnostics, ARunOfMoreThanAnHourOnTheCpuIsProjectedOnce) {
  // 10,000 steps of 32 images at 40 img/s: 8000 s.
  const auto warning = training::long_cpu_run_warning(10000, 32, 40.0);
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("2:13:20"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("configs/quick_cpu.yaml"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("training.max_steps"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("on a GPU (--device cuda)"), std::string::npos) << *warning;
  EXPECT_FALSE(training::long_cpu_run_warning(100, 32, 40.0).has_value());  // 80 s
  // The evaluations count too: 100 steps (80 s) and 20 passes over 10,000 test images, each
  // image a third of a trained one: 80 + 20 * 10000 / 3 / 40 = 1746.7 s; with eval_flip 3413 s,
  // still under the hour; 30 passes with eval_flip: 5080 s.
  EXPECT_FALSE(training::long_cpu_run_warning(100, 32, 40.0, 20, 10000).has_value());
  EXPECT_FALSE(training::long_cpu_run_warning(100, 32, 40.0, 20, 10000, true).has_value());
  const auto evaluating = training::long_cpu_run_warning(100, 32, 40.0, 30, 10000, true);
  ASSERT_TRUE(evaluating.has_value());
  EXPECT_NE(evaluating->find("the remaining 100 steps take about 1:24:40 on this CPU with their "
                             "30 evaluation(s) of 10000 test images"),
            std::string::npos)
      << *evaluating;
  EXPECT_NE(evaluating->find("--set training.max_steps=N --set data.test_limit=N"),
            std::string::npos)
      << *evaluating;

  // A run whose steps are bounded (training.max_steps) is projected from those steps only.
  test_support::TempDir dir;
  auto config = tiny("");
  config.training.epochs = 100000;
  config.training.max_steps = 8;
  train(config, dir / "short");
  EXPECT_EQ(test_support::read_text(dir / "short/train.log").find("on this CPU"),
            std::string::npos);
}

}  // namespace
