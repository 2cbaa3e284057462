#include "training/run/run_dir.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include "test_support.h"
#include "training/platform/errors.h"
#include "training/platform/json_rows.h"
#include "training/run/output_dir.h"

namespace {

namespace fs = std::filesystem;

training::EpochRecord row(int epoch, double loss) {
  training::EpochRecord r;
  r.epoch = epoch;
  r.train_loss = loss;
  return r;
}

// Column `index` (0-based) of each CSV data line.
std::vector<std::string> csv_column(const std::string& csv, size_t index) {
  std::vector<std::string> values;
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    std::istringstream cells(line);
    std::string cell;
    for (size_t i = 0; i <= index; ++i) std::getline(cells, cell, ',');
    values.push_back(cell);
  }
  return values;
}

TEST(RunDirectory, WritesMetricsAsJsonLinesAndCsv) {
  test_support::TempDir dir;
  training::RunDirectory run(dir / "run", false);
  run.record_epoch(row(1, 2.5));
  run.record_epoch(row(2, 1.25));
  EXPECT_EQ(
      test_support::read_text(dir / "run/metrics.jsonl"),
      training::to_json(row(1, 2.5)).dump() + "\n" + training::to_json(row(2, 1.25)).dump() + "\n");
  const auto csv = test_support::read_text(dir / "run/metrics.csv");
  EXPECT_EQ(csv.rfind("epoch,step,lr,train_loss,", 0), 0u) << csv;
  EXPECT_EQ(csv_column(csv, 0), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(csv_column(csv, 3), (std::vector<std::string>{"2.5", "1.25"}));
  EXPECT_TRUE(fs::exists(dir / "run/train.log"));
}

TEST(RunDirectory, SameEpochReplacesItsRowAndResumeTrimsLaterOnes) {
  test_support::TempDir dir;
  {
    training::RunDirectory run(dir / "run", false);
    run.record_epoch(row(1, 2.0));
    run.record_epoch(row(2, 1.0));
    run.record_epoch(row(2, 0.5));
    EXPECT_EQ(run.epochs().size(), 2u);
    run.record_epoch(row(3, 0.25));
  }
  training::RunDirectory resumed(dir / "run", true);
  ASSERT_EQ(resumed.epochs().size(), 3u);
  resumed.keep_epochs_through(2);
  const auto csv = test_support::read_text(dir / "run/metrics.csv");
  EXPECT_EQ(csv_column(csv, 0), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(csv_column(csv, 3), (std::vector<std::string>{"2.0", "0.5"}));
}

// A checkpoint file resumed in a folder without a marker (a run's files copied by hand) makes the
// folder the run's: the marker is written, so the next --resume of the folder finds a run (it was
// refused as "not a run"). A folder that holds another output keeps its marker.
TEST(RunDirectory, AResumeInAFolderWithoutAMarkerMakesItTheRuns) {
  test_support::TempDir dir;
  fs::create_directories(dir / "copied");
  EXPECT_FALSE(training::held_outputs(dir / "copied").kind);
  { training::RunDirectory resumed(dir / "copied", true); }
  const auto held = training::held_outputs(dir / "copied");
  EXPECT_EQ(held.kind, training::OutputKind::Run);
  EXPECT_EQ(held.format, training::output_format(training::OutputKind::Run));
  EXPECT_NO_THROW(training::check_is_run(dir / "copied"));
  {
    auto lock = training::claim_output_dir(dir / "study", training::OutputKind::MemoryStudy, "-o");
  }
  training::adopt_as_run(dir / "study");
  EXPECT_EQ(training::held_outputs(dir / "study").kind, training::OutputKind::MemoryStudy);
}

TEST(RunDirectory, RefusesToReuseADirectoryHoldingARun) {
  test_support::TempDir dir;
  {
    training::RunDirectory run(dir / "run", false);
    run.write_inputs({"a: 1\n", "{}\n"});
  }
  try {
    training::RunDirectory again(dir / "run", false);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("already holds a run"), std::string::npos);
  }
  EXPECT_EQ(test_support::read_text(dir / "run/config.yaml"), "a: 1\n");
}

// decisions.json is written before config.yaml: a write that fails leaves config.yaml, which a
// resume reads for hand edits, as it was (it was rewritten first, and the next resume took the
// refused values as edits).
TEST(RunDirectory, AFailedWriteOfTheInputsLeavesConfigYamlAsItWas) {
  test_support::TempDir dir;
  training::RunDirectory run(dir / "run", false);
  run.write_inputs({"a: 1\n", "{}\n"});
  fs::remove(dir / "run/decisions.json");
  fs::create_directories(dir / "run/decisions.json/x");
  EXPECT_ANY_THROW(run.write_inputs({"a: 2\n", "{}\n"}));
  EXPECT_EQ(test_support::read_text(dir / "run/config.yaml"), "a: 1\n");
  // Read back, a decisions.json that is no file is named (it was an internal error).
  try {
    training::read_decisions(dir / "run", training::Config{});
    ADD_FAILURE() << "a folder was read as decisions.json";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "run/decisions.json").string() + ": not a file");
  }
}

TEST(RunDirectory, CorruptMetricsOnResumeAreNamed) {
  test_support::TempDir dir;
  fs::create_directories(dir / "run");
  std::ofstream(dir / "run/metrics.jsonl") << "{\"epoch\":1}\n{broken\n";
  try {
    training::RunDirectory run(dir / "run", true);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  (dir / "run/metrics.jsonl").string() + ": line 2 is not JSON", 0),
              0u);
  }
}

TEST(RunDirectory, IsLockedWhileOpenAndNamesTheHolder) {
  test_support::TempDir dir;
  auto first = std::make_unique<training::RunDirectory>(dir / "run", false);
  try {
    training::RunDirectory second(dir / "run", true);
    FAIL() << "a second writer was let in";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "run").string() +
                                         ": in use by another train process (pid " +
                                         std::to_string(::getpid()) +
                                         "); wait for it to finish or stop it, or choose another "
                                         "directory");
  }
  first.reset();  // released with its owner
  EXPECT_NO_THROW(training::RunDirectory(dir / "run", true));
}

TEST(RunDirectory, OpeningRemovesTemporariesAnInterruptedWriteLeft) {
  test_support::TempDir dir;
  { training::RunDirectory run(dir / "run", false); }
  std::ofstream(dir / "run/.checkpoint.pt.tmp4242") << "half";
  std::ofstream(dir / "run/.metrics.jsonl.tmp17") << "half";
  std::ofstream(dir / "run/keep.txt") << "mine";
  training::RunDirectory resumed(dir / "run", true);
  EXPECT_FALSE(fs::exists(dir / "run/.checkpoint.pt.tmp4242"));
  EXPECT_FALSE(fs::exists(dir / "run/.metrics.jsonl.tmp17"));
  EXPECT_TRUE(fs::exists(dir / "run/keep.txt"));
}

TEST(RunDirectory, NewRunPathsAreNamedOrStampedAndUnique) {
  test_support::TempDir dir;
  EXPECT_EQ(training::new_run_path(dir.path(), "exp", "resnet50"), dir / "exp");
  const auto stamped = training::new_run_path(dir.path(), "", "resnet50");
  EXPECT_NE(stamped.filename().string().find("-resnet50"), std::string::npos);
  fs::create_directories(stamped);
  EXPECT_NE(training::new_run_path(dir.path(), "", "resnet50"), stamped);
}

// The folder a new output goes to, named before anything is measured and claimed after: a dated
// name taken by another run meanwhile is named again when claimed (a review of the tenth pass:
// two runs started in one second took one name, the second refused after its measurements); a
// refusal names what named the folder.
TEST(RunDirectory, AnOutputFolderSaysWhatNamedItAndADatedOneIsNamedAgainWhenClaimed) {
  test_support::TempDir dir;
  training::Config config;
  config.output.dir = dir.path().string();
  const auto flag = training::output_folder((dir / "given").string(), config, "resnet18", true);
  EXPECT_EQ(flag.path, dir / "given");
  EXPECT_EQ(flag.named_by, "--output-dir");
  EXPECT_EQ(flag.to_claim(), flag.path);
  const auto dated = training::output_folder("", config, "resnet18", true);
  EXPECT_EQ(dated.named_by, "output.dir");
  fs::create_directories(dated.path);  // another run took it in the meantime
  EXPECT_NE(dated.to_claim(), dated.path);
  EXPECT_EQ(dated.to_claim().parent_path(), dated.path.parent_path());
  config.output.name = "exp";
  const auto named = training::output_folder("", config, "resnet18", true);
  EXPECT_EQ(named.path, dir / "exp");
  EXPECT_EQ(named.named_by, "output.dir/output.name");  // a bad output.dir is said too
  fs::create_directories(dir / "exp");
  EXPECT_EQ(training::output_folder("", config, "resnet18", true).named_by, "output.name");
  EXPECT_EQ(training::output_folder("", config, "memory-resnet18", false).named_by, "output.dir");
}

}  // namespace

namespace {

// Sixteenth pass: a resume refused trace.json, memory_snapshot.pickle or gpu.jsonl that were not
// files with the profiler, the snapshot or the sampler off, which do not write them: only what the
// resume writes is judged.
TEST(RunDirectory, AResumeJudgesOnlyTheFilesItWrites) {
  test_support::TempDir dir;
  { training::RunDirectory run(dir / "run", false); }
  for (const char* name : {"trace.json", "memory_snapshot.pickle", "gpu.jsonl"})
    fs::create_directories(dir / "run" / name);
  training::Config config;
  config.monitor.sample_period = 0;
  EXPECT_NO_THROW(training::check_run_to_resume(dir / "run", 0, config));
  for (const auto& [on, name] : std::vector<std::pair<std::function<void()>, std::string>>{
           {[&] { config.monitor.sample_period = 1; }, "gpu.jsonl"},
           {[&] { config.profiler.enabled = true; }, "trace.json"},
           {[&] { config.memory.snapshot = true; }, "memory_snapshot.pickle"}}) {
    config = training::Config{};
    config.monitor.sample_period = 0;
    on();
    try {
      training::check_run_to_resume(dir / "run", 0, config);
      ADD_FAILURE() << name << " not refused";
    } catch (const training::UserError& e) {
      EXPECT_EQ(std::string(e.what()), (dir / "run" / name).string() +
                                           ": not a file, and a resume rewrites it; move it "
                                           "away");
    }
  }
}

// Round 5, an eighteenth pass: the steps train measures after out of memory run once the run's
// folder has closed; their "measuring" line was on the terminal only, and a second Ctrl-C during
// them ended the process with no stop line in train.log. While a ClosedRunLog lives, both go to
// the train.log of the folder that closed as the error left it; the error's line follows.
TEST(RunDirectory, WhatHappensAfterItClosedOnAnErrorGoesToItsLogToo) {
  test_support::TempDir dir;
  const fs::path log = dir / "run/train.log";
  try {
    training::RunDirectory run(dir / "run", false);
    throw std::runtime_error("out of memory");
  } catch (const std::runtime_error&) {
    const training::ClosedRunLog closed;
    spdlog::info("measuring after the error");
  }
  spdlog::info("after the measurement");
  training::log_final_error(spdlog::level::err, "the error's line");
  std::string text = test_support::read_text(log);
  EXPECT_NE(text.find("measuring after the error"), std::string::npos) << text;
  EXPECT_EQ(text.find("after the measurement"), std::string::npos) << text;
  EXPECT_NE(text.find("the error's line"), std::string::npos) << text;
  // A second stop signal while it lives ends the process, its line in train.log.
  EXPECT_EXIT(
      {
        try {
          training::RunDirectory run(dir / "second", false);
          throw std::runtime_error("out of memory");
        } catch (const std::runtime_error&) {
          const training::ClosedRunLog closed;
          training::install_stop_handlers();
          std::raise(SIGINT);
          std::raise(SIGTERM);  // another signal: not the first passed on again
        }
      },
      testing::ExitedWithCode(training::kExitStopped), "by a second signal");
  text = test_support::read_text(dir / "second/train.log");
  EXPECT_NE(text.find("[stopped] by a second signal"), std::string::npos) << text;
}

}  // namespace
