// The run report: report.md and its plots from a run directory.
#include "training/run/run_report.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "training/tiny_run.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using tiny_run::tiny;
using tiny_run::train;

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
  // Round 4: synthetic data was said to come "from datasets/cifar10" (data.root, unread).
  EXPECT_NE(text.find("| data | synthetic (128 training / 32 test images, generated in memory)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("synthetic from"), std::string::npos) << text;
  for (const char* png : {"loss_accuracy.png", "throughput.png", "memory.png"}) {
    std::ifstream in(dir / "run" / png, std::ios::binary);
    char signature[4] = {};
    in.read(signature, 4);
    EXPECT_EQ(std::string(signature + 1, 3), "PNG") << png;
    EXPECT_GT(fs::file_size(dir / "run" / png), 5000u) << png;
  }
}

// A decisions.json whose blocks train never writes for the run's model (no such block, one twice)
// was reported as the run's choice; it is refused in one line naming the file, as a resume
// refuses it from a checkpoint.
TEST(Report, RefusesDecisionsOfBlocksTheModelDoesNotHave) {
  test_support::TempDir dir;
  train(tiny(""), dir / "run");
  for (const std::string blocks : {"[\"layer9.9\"]", "[\"layer1.0\", \"layer1.0\"]"}) {
    std::ofstream(dir / "run" / "decisions.json")
        << R"({"checkpointing": {"decides": "checkpointing.blocks", "blocks": )" << blocks
        << R"(, "chosen_for": "x", "budget_bytes": 1, "predicted_peak_bytes": 5,)"
        << R"( "predicted_extra_ms": 3, "beside_step_bytes": 0}})";
    try {
      training::write_report(dir / "run");
      ADD_FAILURE() << blocks << " was reported";
    } catch (const training::UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(
                    (dir / "run" / "decisions.json").string() + ": checkpointing.blocks: '", 0),
                0u)
          << e.what();
    }
  }
}

// Hostile pass 7: config.yaml or decisions.json edited after the run (batch 16 -> 32, fp32 ->
// bf16) were reported as what it trained, where --resume finds the edit against checkpoint.pt.
// The checkpoint's record is shown, and the report says why.
TEST(Report, FilesEditedSinceTheRunAreShownAsItsCheckpointRecordsThem) {
  test_support::TempDir dir;
  train(tiny(""), dir / "run");
  const fs::path config = dir / "run" / "config.yaml";
  std::string text = test_support::read_text(config);
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"batch_size: 16", "batch_size: 32"},
        {"precision: fp32", "precision: bf16"}}) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " in\n" << text;
    text.replace(at, from.size(), to);
  }
  std::ofstream(config) << text;
  const auto report = test_support::read_text(training::write_report(dir / "run"));
  EXPECT_NE(report.find("config.yaml differs from what " +
                        (dir / "run" / "checkpoint.pt").string() + " records the run trained with"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("| fp32 /"), std::string::npos) << report;
  EXPECT_EQ(report.find("bf16"), std::string::npos) << report;
  EXPECT_NE(report.find("| 16 / 1 |"), std::string::npos) << report;
}

TEST(Report, RefusesAFolderWithoutARun) {
  test_support::TempDir dir;
  EXPECT_THROW(training::write_report(dir.path()), training::UserError);
}

}  // namespace
