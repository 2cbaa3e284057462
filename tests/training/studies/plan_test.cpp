// `train plan` on prepared sweeps: sweep.json files written by the sweep's own writer, with peaks
// on exact lines, so what fits and what is fastest is known in advance.
#include "training/studies/plan.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "training/platform/errors.h"
#include "training/studies/sweep_report.h"

namespace {

namespace fs = std::filesystem;
using training::Precision;
using training::SweepCell;

constexpr int64_t MiB = 1 << 20;

const SweepCell plain{Precision::FP32, training::CheckpointMode::Off,
                      c10::MemoryFormat::Contiguous};
const SweepCell checkpointed{Precision::FP32, training::CheckpointMode::On,
                             c10::MemoryFormat::Contiguous};

training::SweepTrial trial(int64_t id, SweepCell cell, int64_t batch, int64_t peak,
                           double images_per_second, training::TrialStatus status = {}) {
  training::SweepTrial t;
  t.id = id;
  t.cell = cell;
  t.batch = batch;
  t.source = "grid";
  t.result.status = status;
  t.result.peak_allocated_bytes = t.result.peak_reserved_bytes = peak;
  t.result.steady_peak_allocated_bytes = t.result.steady_peak_reserved_bytes = peak;
  t.result.images_per_second = images_per_second;
  t.result.steps = 3;
  return t;
}

// Without checkpointing: 200 MiB + 25 MiB per sample, 100/150/180 images/s at 32/64/128.
// With: 300 MiB + 9.375 MiB per sample, 110/130/140 images/s at 64/128/256.
fs::path prepared_sweep(const test_support::TempDir& dir, const std::string& device = "cpu") {
  const auto ok = training::TrialStatus::Ok;
  std::vector<training::SweepTrial> trials = {
      trial(1, plain, 32, 1000 * MiB, 100, ok),
      trial(2, plain, 64, 1800 * MiB, 150, ok),
      trial(3, plain, 128, 3400 * MiB, 180, ok),
      trial(4, checkpointed, 64, 900 * MiB, 110, ok),
      trial(5, checkpointed, 128, 1500 * MiB, 130, ok),
      trial(6, checkpointed, 256, 2700 * MiB, 140, ok),
      trial(7, plain, 512, 0, 0, training::TrialStatus::OutOfMemory)};
  const std::vector<SweepCell> cells = {plain, checkpointed};
  training::SweepFacts facts{"resnet50", "cifar", device, device, 64LL << 30, false, 1, 2, {}};
  const fs::path sweep = dir / "sweep";
  fs::create_directories(sweep);
  training::write_sweep_tables(sweep, facts, training::summarize(cells, trials, {}, false), trials,
                               true);
  // The sweep's config, as `train sweep` writes it (checkpointing.granularity: block).
  std::ofstream(sweep / "config.yaml") << training::to_yaml(training::parse_config("", "test"));
  return sweep;
}

TEST(Plan, PicksTheFastestSettingThatFits) {
  test_support::TempDir dir;
  // 4 GiB less 10% is 3.6 GiB; less the assumed 1 GiB outside the allocator, 2.6 GiB for the
  // peak: batch 128 without checkpointing (3400 MiB) and 256 with (2700 MiB) do not fit.
  const auto plan = training::make_plan(prepared_sweep(dir), 4LL << 30, 0.10, std::nullopt);
  EXPECT_EQ(plan.overhead_bytes, training::kAssumedCudaOverhead);
  ASSERT_TRUE(plan.chosen);
  const auto& best = plan.candidates.at(*plan.chosen);
  EXPECT_EQ(best.cell, plain);
  EXPECT_EQ(best.batch, 64);
  EXPECT_EQ(best.predicted_peak, 1800 * MiB);
  EXPECT_EQ(plan.candidates.size(), 6u);  // the out-of-memory trial is no candidate
  EXPECT_FALSE(plan.candidates[0].fits);  // 180 images/s, but 3400 MiB
  EXPECT_EQ(training::recommended_flags(plan, best),
            "--set training.batch_size=64 --set training.precision=fp32 --set "
            "checkpointing.enabled=false --set training.memory_format=contiguous");
  // A setting measured with checkpointing is recommended as auto with the plan's budget for the
  // allocator (3.6 GiB less 1 GiB): it recomputes only what that budget needs.
  training::PlanCandidate recomputing = best;
  recomputing.cell = checkpointed;
  EXPECT_TRUE(plan.per_block_checkpointing);  // the sweep's config: granularity block
  EXPECT_EQ(training::recommended_flags(plan, recomputing),
            "--set training.batch_size=64 --set training.precision=fp32 --set "
            "checkpointing.enabled=auto --set checkpointing.budget=" +
                training::byte_size_text(plan.usable_bytes - plan.overhead_bytes) +
                " --set training.memory_format=contiguous");
  training::Plan by_stage = plan;  // a sweep that recomputed stages: recommended as measured
  by_stage.per_block_checkpointing = false;
  EXPECT_NE(training::recommended_flags(by_stage, recomputing).find("checkpointing.enabled=true "),
            std::string::npos);
  const std::string table = training::plan_table(plan);
  EXPECT_NE(table.find("| fp32 / checkpointing off / contiguous | 64 | 150 | 1.76 GiB | "
                       "**recommended** |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 128 | 180 | 3.32 GiB | does not fit: needs a card of 4.80 GiB |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 256 | 140 | 2.64 GiB | does not fit"), std::string::npos) << table;
  EXPECT_NE(table.find("| 128 | 130 | 1.46 GiB | slower: 13% fewer images/s |"), std::string::npos)
      << table;
  // The sweep's fit predicts the largest batch per setting: (2.6 GiB - 200 MiB) / 25 MiB.
  EXPECT_NE(table.find("| fp32 / checkpointing off / contiguous | 98 |"), std::string::npos)
      << table;
}

// A bigger card, or a smaller overhead, lets the faster settings in.
TEST(Plan, ABiggerCardPicksAFasterSetting) {
  test_support::TempDir dir;
  const auto sweep = prepared_sweep(dir);
  const auto plan = training::make_plan(sweep, 6LL << 30, 0.10, std::nullopt);
  EXPECT_EQ(plan.candidates.at(*plan.chosen).batch, 128);
  EXPECT_EQ(plan.candidates.at(*plan.chosen).cell, plain);
  const auto tight = training::make_plan(sweep, 4LL << 30, 0.10, 256 * MiB);
  EXPECT_EQ(tight.candidates.at(*tight.chosen).batch, 128);  // 3400 MiB + 256 MiB <= 3.6 GiB
}

TEST(Plan, RefusesACardTooSmallNamingTheSmallestThatFits) {
  test_support::TempDir dir;
  try {
    training::make_plan(prepared_sweep(dir), 2LL << 30, 0.10, std::nullopt);
    FAIL() << "a 2 GiB card was given a plan";
  } catch (const training::UserError& e) {
    // The smallest peak, 900 MiB with checkpointing at 64, + 1 GiB, / 0.9 = 2.09 GiB.
    EXPECT_EQ(std::string(e.what()),
              "--memory: no measured setting fits in 2.00 GiB with 10% headroom and 1.00 GiB "
              "outside the allocator; the smallest, fp32 / checkpointing on / contiguous at batch "
              "64, needs a card of at least 2.09 GiB");
  }
}

// On CUDA the sweep's trials measured the memory outside the allocator: that is used.
TEST(Plan, UsesTheOverheadACudaSweepMeasured) {
  test_support::TempDir dir;
  const auto sweep = prepared_sweep(dir, "cuda:0");
  auto json = nlohmann::json::parse(test_support::read_text(sweep / "sweep.json"));
  for (auto& row : json.at("trials")) row["outside_allocator_bytes"] = 600 * MiB;
  std::ofstream(sweep / "sweep.json") << json.dump();
  const auto plan = training::make_plan(sweep, 4LL << 30, 0.10, std::nullopt);
  EXPECT_EQ(plan.overhead_bytes, 600 * MiB);
  EXPECT_NE(plan.overhead_source.find("measured on cuda:0"), std::string::npos);
}

TEST(Plan, RefusesBadInput) {
  test_support::TempDir dir;
  EXPECT_DOUBLE_EQ(training::parse_headroom("10%"), 0.10);
  EXPECT_DOUBLE_EQ(training::parse_headroom("0.25"), 0.25);
  EXPECT_DOUBLE_EQ(training::parse_headroom("0"), 0.0);
  for (const std::string bad : {"", "%", "100%", "1", "-5%", "ten", "10%%", "nan"}) {
    EXPECT_THROW(training::parse_headroom(bad), training::UserError) << bad;
  }
  fs::create_directories(dir / "empty");
  try {
    training::make_plan(dir / "empty", 4LL << 30, 0.1, std::nullopt);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no sweep (no sweep.json)"), std::string::npos);
  }
  std::ofstream(dir / "empty/sweep.json") << "{\"arch\": 1}";
  try {
    training::make_plan(dir / "empty", 4LL << 30, 0.1, std::nullopt);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not a sweep written by `train sweep`"),
              std::string::npos);
  }
  training::PlanRequest request;
  request.from = (dir / "empty").string();
  for (const std::string memory : {"12XB", "0", "", "-1GiB"}) {
    request.memory = memory;
    try {
      training::plan_command(request);
      FAIL() << memory;
    } catch (const training::UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--memory: ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
