// Round 4 of the hostile pass (issue 39, docs/reliability.md): one source of truth per file, and
// outputs written as their formats say. Every test reproduced its case before the change that
// made it pass.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>

#include "app/cli_support.h"

namespace {

namespace fs = std::filesystem;
using cli::count_lines;
using cli::run_train;
using cli::write_tiny_config;

void replace_in(const fs::path& file, const std::string& from, const std::string& to) {
  std::string text = test_support::read_text(file);
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " in " << text;
  text.replace(at, from.size(), to);
  std::ofstream(file) << text;
}

// --resume ignored a hand-edited config.yaml and rewrote it from the checkpoint's copy without a
// word. The edit is now taken as --set takes it (and refused where --set would be), and a refused
// resume leaves the file as the user wrote it.
TEST(Sources, AResumeTakesTheHandEditedConfigAsSetWouldOrRefusesIt) {
  test_support::TempDir dir;
  const auto run = cli::finished_tiny_run(dir);
  replace_in(run / "config.yaml", "  epochs: 1\n", "  epochs: 2\n");
  auto r = run_train("--resume " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("training.epochs=2"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 2);
  EXPECT_NE(test_support::read_text(run / "config.yaml").find("  epochs: 2\n"), std::string::npos);

  replace_in(run / "config.yaml", "arch: resnet18", "arch: resnet34");
  const auto edited = test_support::read_text(run / "config.yaml");
  r = run_train("--resume " + run.string() + " --set training.epochs=3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(test_support::read_text(run / "config.yaml"), edited);
}

// `train --resume RUN --output-dir OTHER` trained the next epoch into OTHER alone, splitting the
// run's history; a run continues in its own directory.
TEST(Sources, AResumeIntoAnotherDirectoryIsRefused) {
  test_support::TempDir dir;
  const auto run = cli::finished_tiny_run(dir);
  const auto r = run_train("--resume " + run.string() + " --set training.epochs=2 --output-dir " +
                           (dir / "other").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("a resumed run continues in its own directory"), std::string::npos)
      << r.output;
  // Round 5: the advised command named a literal RUN; it names the run's own config.
  EXPECT_NE(r.output.find("from its config: --config " + (run / "config.yaml").string() +
                          " --output-dir " + (dir / "other").string()),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "other"));
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 1);
}

// Round 5: a resume said "2 epochs of 2 steps (4 steps planned)" at start-up, then "6 steps planned
// in all": the start-up line leaves a resume's steps to the line that counts those done.
TEST(Sources, AResumeSaysItsStepsPlannedOnceCountingThoseDone) {
  test_support::TempDir dir;
  const auto run = cli::finished_tiny_run(dir);  // 1 epoch of 4 steps
  const auto r = run_train("--resume " + run.string() +
                           " --set training.epochs=2 --set training.accumulate_steps=2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2 epochs of 2 steps (the steps planned follow from the checkpoint)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("4 steps done; 6 steps planned in all"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" steps planned)"), std::string::npos) << r.output;
  // A cap already reached is said as the epochs are (it said "5 steps planned in all", then
  // "done" without a word).
  const auto capped =
      run_train("--resume " + run.string() + " --set training.epochs=3 --set training.max_steps=5");
  EXPECT_EQ(capped.code, 0) << capped.output;
  EXPECT_NE(capped.output.find("training.max_steps 5 is reached (6 steps done); to train on, raise "
                               "it or set it to 0 (no cap)"),
            std::string::npos)
      << capped.output;
}

// `train bench loader --config X.yaml --output X.yaml` replaced the config with its JSON (exit 0).
TEST(Sources, NoCommandWritesItsOutputOntoItsInput) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir);
  const auto before = test_support::read_text(config);
  for (const auto& output : {config.string(), (dir / "." / "tiny.yaml").string()}) {
    auto r =
        run_train("bench loader --config " + config.string() + " --batches 1 --output " + output);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find("--output: " + output + " is the --config file"), std::string::npos)
        << r.output;
    EXPECT_EQ(test_support::read_text(config), before);
  }
  const auto r =
      run_train("sweep-trial --config " + config.string() + " --result " + config.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(test_support::read_text(config), before);
}

}  // namespace
