// `train memory` in this process: its folder, its table, and what it refuses before writing.
#include "training/studies/memory_report.h"

#include <gtest/gtest.h>

#include <fstream>
#include <tuple>

#include "test_support.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"

namespace {

namespace fs = std::filesystem;

// The plots need a Python with matplotlib: the one the build found.
const bool report_python_chosen = setenv("TRAIN_PYTHON", TEST_PYTHON, /*overwrite=*/0) == 0;

training::MemoryRequest request(const test_support::TempDir& dir, const std::string& settings) {
  std::ofstream(dir / "memory.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                        "training: {device: cpu, batch_size: 2}\n";
  training::MemoryRequest r;
  r.config_path = (dir / "memory.yaml").string();
  r.settings = settings;
  r.output_dir = (dir / "study").string();
  return r;
}

TEST(MemoryReport, WritesTheStudyFolder) {
  test_support::TempDir dir;
  ASSERT_EQ(training::memory_command(request(dir, "fp32,fp32+checkpointing")), training::kExitOk);
  const fs::path study = dir / "study";
  std::ifstream in(study / "memory_breakdown.json");
  const auto json = nlohmann::json::parse(in);
  ASSERT_EQ(json.at("settings").size(), 2u);
  EXPECT_EQ(json.at("settings")[1].at("setting"), "fp32+checkpointing");
  EXPECT_EQ(json.at("batch_size"), 2);
  std::ifstream timeline_in(study / "memory_timeline.json");
  const auto timeline = nlohmann::json::parse(timeline_in);
  EXPECT_GT(timeline.at("settings")[0].at("points").size(), 100u);
  const std::string md = test_support::read_text(study / "memory_breakdown.md");
  EXPECT_NE(md.find("| layer4.1 | 2×512×4×4 |"), std::string::npos) << md;
  EXPECT_NE(md.find("**measured peak**"), std::string::npos);
  for (const char* png : {"memory_breakdown.png", "memory_timeline.png"}) {
    std::ifstream image(study / png, std::ios::binary);
    char signature[4] = {};
    image.read(signature, 4);
    EXPECT_EQ(std::string(signature + 1, 3), "PNG") << png;
  }
  // A second study into the same folder is refused.
  try {
    training::memory_command(request(dir, "fp32"));
    ADD_FAILURE() << "an existing study was overwritten";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("already holds a memory study"), std::string::npos)
        << e.what();
  }
}

// Bad input is refused before the folder exists; an empty --settings is no list, not the defaults.
TEST(MemoryReport, RefusesBadInputBeforeWriting) {
  test_support::TempDir dir;
  for (const std::string settings : {"fp32,fp64", "bf16+", ",", ""}) {
    try {
      training::memory_command(request(dir, settings));
      ADD_FAILURE() << settings << " was accepted";
    } catch (const training::UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--settings: ", 0), 0u) << e.what();
    }
  }
  // One rule for every list (round 5: fp32,fp32 was merged into one setting in silence); the same
  // setting written two ways is the same setting.
  for (const std::string settings : {"fp32,fp32", "fp32+checkpointing,bf16,fp32+checkpointing"}) {
    try {
      training::memory_command(request(dir, settings));
      ADD_FAILURE() << settings << " was accepted";
    } catch (const training::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("repeats item 1; list each value once"),
                std::string::npos)
          << e.what();
    }
  }
  auto snapshot = request(dir, "fp32");
  snapshot.overrides.emplace_back("memory.snapshot=true");
  try {
    training::memory_command(snapshot);
    ADD_FAILURE() << "memory.snapshot was accepted on the CPU";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--set memory.snapshot: memory.snapshot: ", 0), 0u)
        << e.what();
  }
  // checkpointing auto on the CPU without memory.limit or checkpointing.budget: no budget to choose
  // for, refused before the study's folder exists.
  try {
    training::memory_command(request(dir, "fp32,fp32+checkpointing=auto"));
    ADD_FAILURE() << "auto without a budget was accepted on the CPU";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--settings: fp32+checkpointing=auto needs a memory budget, and on the CPU there is "
              "no card to take it from: set memory.limit (--set memory.limit=2GiB, which every "
              "command takes) or checkpointing.budget");
  }
  EXPECT_FALSE(fs::exists(dir / "study"));
}

// A setting that chooses no blocks (not checkpointing auto) has none to say: null, as sweep.json
// and a --card-only study write (it wrote [] and 0, read as "auto chose none").
TEST(MemoryReport, ASettingThatChoosesNoBlocksSaysNull) {
  test_support::TempDir dir;
  ASSERT_EQ(training::memory_command(request(dir, "fp32")), training::kExitOk);
  std::ifstream in(dir / "study" / "memory_breakdown.json");
  const auto setting = nlohmann::json::parse(in).at("settings").at(0);
  EXPECT_TRUE(setting.at("recomputed_blocks").is_null()) << setting.dump();
  EXPECT_TRUE(setting.at("predicted_peak_bytes").is_null()) << setting.dump();
}

// No memory.limit is no limit: null, not 0, which memory.limit refuses as a limit; a limit set is
// its bytes.
TEST(MemoryReport, NoMemoryLimitSaysNull) {
  test_support::TempDir dir;
  ASSERT_EQ(training::memory_command(request(dir, "fp32")), training::kExitOk);
  std::ifstream in(dir / "study" / "memory_breakdown.json");
  const auto json = nlohmann::json::parse(in);
  EXPECT_TRUE(json.at("memory_limit_bytes").is_null()) << json.at("memory_limit_bytes");
}

// Round 5: a setting that ran out of memory wrote measured_peak_bytes 0, itemized 0, reserved 0
// and a peak phase ("forward"), figures it never measured: null, as a setting that chooses no
// blocks says null. An auto setting whose choice ran out of memory chose nothing: null, not [] and
// 0 ("auto chose none").
TEST(MemoryReport, ASettingThatRanOutOfMemoryMeasuredNothing) {
  test_support::TempDir dir;
  struct NoLimitAfter {  // the study set memory.limit for this process: not for the next tests
    ~NoLimitAfter() { training::TrackingCpuAllocator::instance().set_limit(0); }
  } no_limit_after;
  auto limited = request(dir, "fp32,fp32+checkpointing=auto");
  // Above what the run holds whatever the batch with one image (128.18 MiB: below it the study is
  // refused), below what a step holds.
  limited.overrides.emplace_back("memory.limit=129MiB");
  // auto's budget is the whole limit (its 10% headroom would put the budget below the weights:
  // refused before any measurement, the tenth pass's F4).
  limited.overrides.emplace_back("checkpointing.headroom=0");
  EXPECT_EQ(training::memory_command(limited), training::kExitOutOfMemory);
  std::ifstream in(dir / "study" / "memory_breakdown.json");
  const auto settings = nlohmann::json::parse(in).at("settings");
  for (const auto& setting : settings) {
    EXPECT_EQ(setting.at("status"), "oom");
    for (const char* key :
         {"peak_phase", "measured_peak_bytes", "itemized_peak_bytes", "reserved_bytes",
          "unexplained_bytes", "recomputed_blocks", "predicted_peak_bytes"}) {
      EXPECT_TRUE(setting.at(key).is_null()) << key << ": " << setting.dump();
    }
  }
  EXPECT_EQ(settings.at(1).at("checkpointing"), "auto");
  std::ifstream limited_in(dir / "study" / "memory_breakdown.json");
  EXPECT_EQ(nlohmann::json::parse(limited_in).at("memory_limit_bytes"), 129 << 20);
  limited.settings = "fp32";
  // With a card it is predicted all the same (the card's recording is its own): round 5 found
  // such a setting silently without its card fields, where --card-only predicted it.
  limited.card = "T4";
  limited.output_dir = (dir / "on-card").string();
  EXPECT_EQ(training::memory_command(limited), training::kExitOutOfMemory);
  std::ifstream on_card(dir / "on-card" / "memory_breakdown.json");
  const auto predicted = nlohmann::json::parse(on_card).at("settings").at(0);
  EXPECT_EQ(predicted.at("status"), "oom");
  EXPECT_EQ(predicted.at("fits"), false) << predicted.dump();  // under memory.limit's 128 MiB
  EXPECT_GT(predicted.at("needed_allocator_limit_bytes").get<int64_t>(), 128 << 20);
}

// Hostile pass 8: under a memory.limit below what every setting holds whatever the batch (the
// weights, their gradients and momentum: 127.91 MiB for ResNet-18) the study measured each setting
// out of memory and wrote its folder (exit 3), where train and train sweep refuse at once: refused
// the same way, one line, exit 3, nothing written; likewise a checkpointing.budget below it for a
// setting whose blocks auto chooses.
TEST(MemoryReport, ALimitNoBatchFitsIsRefusedBeforeAnythingIsMeasured) {
  test_support::TempDir dir;
  struct NoLimitAfter {
    ~NoLimitAfter() { training::TrackingCpuAllocator::instance().set_limit(0); }
  } no_limit_after;
  for (const auto& [settings, set, says] :
       {std::tuple<std::string, std::string, std::string>{
            "fp32,fp32+checkpointing", "memory.limit=50MiB",
            "memory.limit 50.00 MiB: the weights and their gradients and momentum alone take "
            "127.91 MiB: more memory or a smaller model.arch"},
        std::tuple<std::string, std::string, std::string>{
            "fp32,fp32+checkpointing=auto", "checkpointing.budget=100MiB",
            "checkpointing.budget 100.00 MiB: the weights and their gradients and momentum alone "
            "take 127.91 MiB: a larger checkpointing.budget or a smaller model.arch"}}) {
    auto limited = request(dir, settings);
    limited.overrides.emplace_back(set);
    try {
      training::memory_command(limited);
      ADD_FAILURE() << "a study measured under " << set;
    } catch (const training::OutOfMemory& e) {
      EXPECT_EQ(std::string(e.what()), says);
    }
    EXPECT_FALSE(fs::exists(dir / "study")) << set;
  }
}

// Blocks given by hand need no budget (nothing is chosen; train takes them without one), and the
// table says where they came from instead of "predicted peak 0 B".
TEST(MemoryReport, BlocksGivenByHandNeedNoBudgetAndPredictNothing) {
  test_support::TempDir dir;
  auto given = request(dir, "fp32+checkpointing=auto");
  given.overrides.emplace_back("checkpointing.enabled=auto");
  given.overrides.emplace_back("checkpointing.blocks=[layer2.0]");
  ASSERT_EQ(training::memory_command(given), training::kExitOk);
  std::ifstream in(dir / "study" / "memory_breakdown.json");
  const auto setting = nlohmann::json::parse(in).at("settings").at(0);
  EXPECT_EQ(setting.at("recomputed_blocks"), nlohmann::json::array({"layer2.0"}));
  EXPECT_EQ(setting.at("predicted_peak_bytes"), 0);
  const std::string md = test_support::read_text(dir / "study" / "memory_breakdown.md");
  EXPECT_EQ(md.find("predicted peak 0 B"), std::string::npos) << md;
  EXPECT_NE(md.find("recomputes layer2.0 (given by checkpointing.blocks)"), std::string::npos)
      << md;
}

}  // namespace
