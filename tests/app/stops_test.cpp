// Round 4 of the hostile pass (issue 39, docs/reliability.md): stops that lost a run, folders
// checked before their lock. Every test reproduced its case before the change that made it pass.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "app/cli_support.h"

namespace {

namespace fs = std::filesystem;
using cli::count_lines;
using cli::run_shell;
using cli::run_train;
using cli::write_tiny_config;

std::string tiny_run(const test_support::TempDir& dir, const fs::path& run, int epochs,
                     const std::string& extra = "") {
  return "--config " + write_tiny_config(dir, epochs).string() + " --output-dir " + run.string() +
         " " + extra;
}

int rows(const fs::path& run) {
  return count_lines(test_support::read_text(run / "metrics.jsonl"));
}

// A death between epoch 1's metrics row and its checkpoint (kill -9, a second Ctrl-C) left a run
// that could never be continued: "checkpoint.pt: missing, but the run recorded 1 epoch(s)". The
// run now writes a start checkpoint before its first step, so the row is ahead of a checkpoint
// and is trained again on resume.
TEST(Stops, AKillBetweenAnEpochsRowAndItsCheckpointLeavesARunThatResumes) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r = run_shell("TRAIN_TEST_KILL_AT=epoch-row " + std::string(TRAIN_BINARY) + " " +
                     tiny_run(dir, run, 2));
  EXPECT_NE(r.code, 0) << r.output;
  ASSERT_EQ(rows(run), 1) << r.output;
  r = run_train("--resume " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("0 epochs and 0 steps done"), std::string::npos) << r.output;
  EXPECT_EQ(rows(run), 2);
  const auto metrics = test_support::read_text(run / "metrics.jsonl");
  EXPECT_NE(metrics.find("\"epoch\":1,"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"epoch\":2,"), std::string::npos) << metrics;
}

// A run that diverged in epoch 1 advised `--resume ... --set optimizer.lr=...`, which was refused
// (no checkpoint). The start checkpoint makes that advice true; without checkpoints the message
// says so instead of advising a resume.
TEST(Stops, ADivergedFirstEpochAdvisesAResumeOnlyWhereOneIsPossible) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r = run_train(tiny_run(dir, run, 2, "--set optimizer.lr=1000"));
  ASSERT_EQ(r.code, 6) << r.output;
  EXPECT_NE(r.output.find("train --resume " + run.string() + " --set optimizer.lr=100"),
            std::string::npos)
      << r.output;
  r = run_train("--resume " + run.string() + " --set optimizer.lr=0.01 --set training.epochs=1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("0 epochs and 0 steps done"), std::string::npos) << r.output;
  EXPECT_EQ(rows(run), 1);
  const auto row = nlohmann::json::parse(test_support::read_text(run / "metrics.jsonl"));
  EXPECT_TRUE(row["train_loss"].is_number()) << row.dump();

  const auto bare = dir / "bare";
  r = run_train(tiny_run(dir, bare, 2, "--set optimizer.lr=1000 --set checkpoint.enabled=false"));
  ASSERT_EQ(r.code, 6) << r.output;
  EXPECT_EQ(r.output.find("--resume"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no checkpoint was written (checkpoint.enabled: false)"),
            std::string::npos)
      << r.output;
}

}  // namespace
