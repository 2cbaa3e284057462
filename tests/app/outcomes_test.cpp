// Round 2 of the hostile-user review (docs/reliability.md): how each command ends — a diverged
// run, a stop at any moment, a killed parent, a missing Python — and which folders each command
// may write. Every test reproduced its case before the change that made it pass.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "app/cli_support.h"
#include "training/platform/tensorboard.h"
#include "training/run/epoch_record.h"

namespace {

namespace fs = std::filesystem;
using cli::count_lines;
using cli::processes_running_with;
using cli::run_shell;
using cli::run_train;
using cli::write_tiny_config;

std::string tiny_run(const test_support::TempDir& dir, const fs::path& run,
                     const std::string& extra = "") {
  return "--config " + write_tiny_config(dir).string() + " --output-dir " + run.string() + " " +
         extra;
}

// A loss that became NaN trained to the end, then the run's own metrics could not be read back:
// exit 2, no report, and report/compare refused the run for ever.
TEST(Outcomes, ADivergedRunStopsAndIsReportedAndCompared) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r = run_train(tiny_run(dir, run, "--set optimizer.lr=1000 --set training.epochs=3"));
  EXPECT_EQ(r.code, 6) << r.output;
  EXPECT_NE(r.output.find("[error] training diverged in epoch 1 by step 4"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("epoch 2/3"), std::string::npos) << "trained on after diverging";
  EXPECT_NE(test_support::read_text(run / "metrics.jsonl").find("null"), std::string::npos);
  const auto report = test_support::read_text(run / "report.md");
  EXPECT_NE(report.find("| **diverged** | diverged in epoch 1 (step 4): the "), std::string::npos)
      << report;
  // The checkpoint is the start checkpoint (step 0), not the diverged weights: the resume from it
  // is Stops.ADivergedFirstEpochAdvisesAResumeOnlyWhereOneIsPossible.
  EXPECT_TRUE(fs::exists(run / "checkpoint.pt"));
  r = run_train("report " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_train("compare " + run.string() + " --output " + (dir / "cmp").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("| diverged | in epoch 1 |"), std::string::npos) << r.output;
  // read_tensorboard prints JSON (NaN as null), which a strict parser reads.
  if (training::tensorboard_built()) {
    r = run_shell(std::string(TEST_PYTHON) + " " + PROJECT_SOURCE_DIR +
                  "/scripts/read_tensorboard.py " + run.string() + " 2>/dev/null");
    if (r.code == 0) {
      EXPECT_NO_THROW(static_cast<void>(nlohmann::json::parse(r.output).size())) << r.output;
    }
  }
}

// Metrics rows with null (a non-finite value) read back as NaN.
TEST(Outcomes, ANullLossReadsBackAsNaN) {
  training::EpochRecord first;
  first.epoch = 1;
  nlohmann::json row = training::to_json(first);
  row["train_loss"] = nullptr;
  const auto record = training::epoch_record_from_json(row, "metrics.jsonl row 1");
  EXPECT_TRUE(std::isnan(record.train_loss));
  EXPECT_TRUE(training::diverged(record));
}

// `train --resume` of a sweep trained a 30-epoch run into it; `compare --output` onto a run
// overwrote its plots; a user's own files in --output-dir were overwritten.
TEST(Outcomes, EachFolderIsWrittenOnlyByItsOwnCommand) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir).string();
  const auto sweep = dir / "sweep";
  auto r = run_train("sweep --config " + config + " --batch-sizes 2 --set sweep.warmup_steps=0 " +
                     "--set sweep.measure_steps=1 --output-dir " + sweep.string());
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_train("--resume " + sweep.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(sweep.string() + ": holds a sweep, not a run"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(sweep / "checkpoint.pt"));
  r = run_train("--config " + config + " --output-dir " + sweep.string());
  EXPECT_NE(r.output.find("already holds a sweep"), std::string::npos) << r.output;
  EXPECT_NE(
      test_support::read_text(sweep / "sweep.md").find("evaluates at training.eval_batch_size"),
      std::string::npos);

  const auto run = dir / "run";
  ASSERT_EQ(run_train(tiny_run(dir, run)).code, 0);
  const auto plot_log = test_support::read_text(run / "plot.log");
  r = run_train("compare " + run.string() + " --output " + run.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(run.string() + ": already holds a run; choose another --output"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(test_support::read_text(run / "plot.log"), plot_log);
  EXPECT_FALSE(fs::exists(run / "compare.md"));

  const auto own = dir / "own";
  fs::create_directories(own);
  std::ofstream(own / "metrics.csv") << "my,own\n";
  r = run_train(tiny_run(dir, own));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("holds files that are not a run (metrics.csv)"), std::string::npos)
      << r.output;
  EXPECT_EQ(test_support::read_text(own / "metrics.csv"), "my,own\n");

  // A checkpoint file is resumed into its own folder, which must be a run: one copied into the
  // sweep is refused; one named from inside its run ("checkpoint.pt") continues that run (was
  // "no config", its folder taken for none).
  fs::copy_file(run / "checkpoint.pt", sweep / "copied.pt");
  r = run_train("--resume " + (sweep / "copied.pt").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("holds a sweep, not a run"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(sweep / "metrics.jsonl"));
  r = run_shell("cd " + run.string() + " && " + TRAIN_BINARY +
                " --resume checkpoint.pt --set training.epochs=2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 2);  // two epochs
  // Resumed once more, the finished run says how to train on.
  r = run_train("--resume " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("all 2 epochs of training.epochs are trained; to train on, raise it"),
            std::string::npos)
      << r.output;
}

// kill -9 of `train sweep` left its trial running for up to sweep.trial_timeout.
TEST(Outcomes, ATrialDiesWithItsSweep) {
  test_support::TempDir dir;
  std::ofstream(dir / "sweep.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                       "training: {device: cpu}\n"
                                       "sweep: {warmup_steps: 0, measure_steps: 50}\n";
  cli::Background sweep({"sweep", "--config", (dir / "sweep.yaml").string(), "--batch-sizes", "256",
                         "--output-dir", (dir / "sweep").string()},
                        dir / "sweep.log");
  ASSERT_TRUE(cli::wait_for_file(dir / "sweep/trials/001.log"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  sweep.signal(SIGKILL);
  sweep.wait();
  int left = 1;
  for (int i = 0; i < 100 && (left = processes_running_with(dir / "sweep/trials/001.yaml")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(left, 0) << "the trial outlived its sweep";
}

// Whether `pid` catches SIGTERM (its handler is installed): /proc/<pid>/status, SigCgt.
bool catches_sigterm(pid_t pid) {
  std::istringstream status(test_support::read_text("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigCgt:", 0) == 0) {
      return (std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1)) & 1;
    }
  }
  return false;
}

// A stop at any moment is exit 130 (SIGTERM early in `train` was 143), and leaves a folder its
// command can use again (a stopped memory study was refused as "already holds a run").
TEST(Outcomes, AStopAtAnyMomentIsExit130AndTheFolderCanBeUsedAgain) {
  test_support::TempDir dir;
  for (int delay_ms : {0, 100, 400}) {
    const auto run = dir / ("run" + std::to_string(delay_ms));
    cli::Background early(
        {"--config", write_tiny_config(dir).string(), "--output-dir", run.string()},
        dir / "early.log");
    for (int i = 0; i < 200 && !catches_sigterm(early.pid()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    early.signal(SIGTERM);
    EXPECT_EQ(early.wait(), 130) << delay_ms
                                 << " ms: " << test_support::read_text(dir / "early.log");
    auto r = run_train(tiny_run(dir, run));
    if (r.code == 2) {  // stopped after its first step: continued, not started again
      EXPECT_NE(r.output.find("continue it with --resume"), std::string::npos) << r.output;
      r = run_train("--resume " + run.string());
    }
    EXPECT_EQ(r.code, 0) << delay_ms << " ms: " << r.output;
  }
  const auto study = dir / "study";
  const std::string memory = "memory --config " + write_tiny_config(dir).string() +
                             " --settings fp32 --output-dir " + study.string();
  {
    cli::Background stopped({"memory", "--config", write_tiny_config(dir).string(), "--settings",
                             "fp32", "--output-dir", study.string()},
                            dir / "memory.log");
    ASSERT_TRUE(cli::wait_for_file(study / ".train-output"));
    stopped.signal(SIGTERM);
    EXPECT_EQ(stopped.wait(), 130) << test_support::read_text(dir / "memory.log");
  }
  auto r = run_train(memory);
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_train(memory);
  EXPECT_EQ(r.code, 2) << "a finished study was redone: " << r.output;
}

// With checkpoint.enabled: false, Ctrl-C said "checkpoint written, continue with --resume".
TEST(Outcomes, AStopWithoutCheckpointsSaysTheRunCannotBeContinued) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  cli::Background slow(
      {"--config", write_tiny_config(dir, 20).string(), "--output-dir", run.string(), "--set",
       "data.simulated_delay_ms=300", "--set", "checkpoint.enabled=false"},
      dir / "slow.log");
  ASSERT_TRUE(cli::wait_for_text(run / "train.log", "step 1/4"));
  slow.signal(SIGINT);
  EXPECT_EQ(slow.wait(), 130);
  const auto log = test_support::read_text(dir / "slow.log");
  EXPECT_NE(log.find("no checkpoint written (checkpoint.enabled: false): this run cannot be "
                     "continued"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("continue with"), std::string::npos) << log;
}

// Two SIGTERMs 15 ms apart (issue 57): the process died of the second one, exit 143, with no line.
// The second stop ends it at once, as every stop does (exit 130, one line, in train.log too), and
// the run continues from the checkpoint it had. (The second from another process: the same
// sender's within 0.1 s is the first passed on again, stop_signal.h.)
TEST(Outcomes, ASecondStopEndsAtOnceWithExit130AndALine) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  cli::Background slow({"--config", write_tiny_config(dir, 2).string(), "--output-dir",
                        run.string(), "--set", "data.simulated_delay_ms=300"},
                       dir / "slow.log");
  ASSERT_TRUE(cli::wait_for_text(run / "train.log", "step 1/4"));
  slow.signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(15));
  slow.signal_from_another_process(SIGTERM);
  EXPECT_EQ(slow.wait(), 130);
  const std::string line =
      "[stopped] by a second signal, at once (exit 130); the files written atomically (checkpoint, "
      "metrics, reports) are whole";
  EXPECT_NE(test_support::read_text(dir / "slow.log").find(line), std::string::npos)
      << test_support::read_text(dir / "slow.log");
  EXPECT_NE(test_support::read_text(run / "train.log").find(line), std::string::npos);
  const auto r = run_train("--resume " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
}

// torch_data cannot continue an epoch part-way: Ctrl-C mid-epoch replaced the epoch's
// checkpoint with one that --resume then refused.
TEST(Outcomes, AStopMidEpochUnderTorchDataKeepsTheEpochsCheckpoint) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  ASSERT_EQ(run_train(tiny_run(dir, run, "--set data.loader=torch_data")).code, 0);
  const auto checkpoint = test_support::read_text(run / "checkpoint.pt");
  {
    cli::Background slow({"--resume", run.string(), "--set", "training.epochs=3", "--set",
                          "data.simulated_delay_ms=300"},
                         dir / "slow.log");
    ASSERT_TRUE(cli::wait_for_text(run / "train.log", "epoch 2/3  step 1/4"));
    slow.signal(SIGINT);
    EXPECT_EQ(slow.wait(), 130);
  }
  const auto log = test_support::read_text(dir / "slow.log");
  EXPECT_NE(log.find("the checkpoint of epoch 1 is kept"), std::string::npos) << log;
  EXPECT_EQ(test_support::read_text(run / "checkpoint.pt"), checkpoint);
  const auto r = run_train("--resume " + run.string() + " --set training.epochs=2");
  EXPECT_EQ(r.code, 0) << r.output;
  // Fifteenth pass: a run that ended part-way at training.max_steps under torch_data (which writes
  // no mid-epoch checkpoint) was reported "stopped ... continue with --resume"; its rows say it
  // reached its end. A resume without checkpoints, which left the checkpoint behind the epochs it
  // trained (the finished run then reported stopped too), is refused.
  const auto ended = dir / "ended";
  ASSERT_EQ(run_train(tiny_run(dir, ended,
                               "--set data.loader=torch_data --set training.epochs=2 --set "
                               "training.max_steps=6"))
                .code,
            0);
  ASSERT_EQ(run_train("report " + ended.string()).code, 0);
  const auto report = test_support::read_text(ended / "report.md");
  EXPECT_EQ(report.find("**stopped**"), std::string::npos) << report;
  const auto refused = run_train("--resume " + run.string() +
                                 " --set training.epochs=3 --set checkpoint.enabled=false");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("checkpoint.enabled: false on a resume would leave"),
            std::string::npos)
      << refused.output;
}

// A mid-epoch checkpoint resumed under another seed, data size, augmentation or image size (eighth
// hostile pass: the rest of epoch 1 at 16x16, its row mixing the two) trained the rest of the
// epoch on other samples without a word.
TEST(Outcomes, AMidEpochResumeWithOtherSamplesIsRefused) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  ASSERT_EQ(run_train(tiny_run(dir, run, "--set training.max_steps=2")).code, 0);
  for (const std::string change : {"training.seed=7", "data.synthetic_train_size=160",
                                   "data.augment=false", "data.image_size=16"}) {
    const auto r =
        run_train("--resume " + run.string() + " --set training.max_steps=0 --set " + change);
    EXPECT_EQ(r.code, 2) << change << ": " << r.output;
    EXPECT_EQ(r.output.find("[error]"), r.output.rfind("[error]")) << r.output;  // one error line
    EXPECT_NE(r.output.find(change.substr(0, change.find('=')) + ": "), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("stopped 2 batches into epoch 1"), std::string::npos) << r.output;
  }
}

// A missing Python turned a finished run, sweep or comparison into exit 2 without report.md; a
// plot log that cannot be written was blamed on Python.
TEST(Outcomes, PlotsThatCannotBeDrawnAreLeftOutNotTheResults) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r = run_shell("TRAIN_PYTHON=/nowhere/python " + std::string(TRAIN_BINARY) + " " +
                     tiny_run(dir, run));
  EXPECT_EQ(r.code, 0) << r.output;
  const auto report = test_support::read_text(run / "report.md");
  EXPECT_NE(report.find("Not drawn: Python /nowhere/python: cannot start"), std::string::npos)
      << report;
  r = run_shell("TRAIN_PYTHON=/nowhere/python " + std::string(TRAIN_BINARY) + " compare " +
                run.string() + " --output " + (dir / "cmp").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "cmp/compare.md"));
  // A plot log that cannot be written (here a folder in its place: the tests run as root, whom a
  // read-only folder does not stop) is named, and Python is not blamed.
  fs::remove(run / "plot.log");
  fs::create_directories(run / "plot.log/kept");
  r = run_train("report " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  const auto redone = test_support::read_text(run / "report.md");
  EXPECT_NE(redone.find("Not drawn: " + (run / "plot.log").string() + ": cannot write"),
            std::string::npos)
      << redone;
  EXPECT_EQ(redone.find("Python"), std::string::npos) << redone;
}

// A value checked where it is used (the device exists, the memory limit fits the device) was
// blamed on its key when a flag had set it: "training.device: ..." for --device.
TEST(Outcomes, AValueIsBlamedOnTheFlagOrFileThatSetIt) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir).string();
  const std::string lacking = "'cuda:9' requested, but";  // no machine here has ten GPUs
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--config " + config + " --device cuda:9", "--device: training.device: " + lacking},
      {"--config " + config + " --set training.device=cuda:9",
       "--set training.device: training.device: " + lacking},
      {"sweep --config " + config + " --device cuda:9", "--device: training.device: " + lacking},
      {"memory --config " + config + " --device cuda:9", "--device: training.device: " + lacking},
      {"memory --config " + config + " --memory-limit 64TiB",
       "--memory-limit: memory.limit: 64.00 TiB is more than"},
      {"sweep --config " + config + " --memory-limit 64TiB",
       "--memory-limit: memory.limit: 64.00 TiB is more than"}};
  for (const auto& [arguments, said] : cases) {
    const auto r = run_train(arguments + " --output-dir " + (dir / "out").string());
    EXPECT_EQ(r.code, 2) << arguments << ": " << r.output;
    EXPECT_EQ(r.output.find("[error]"), r.output.rfind("[error]")) << r.output;  // one error line
    EXPECT_NE(r.output.find(said), std::string::npos) << arguments << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir / "out")) << arguments;  // refused before anything is written
    fs::remove_all(dir / "out");
  }
  // Set in the file, the file is named.
  const auto gpu = dir / "gpu.yaml";
  std::ofstream(gpu) << "training: {device: cuda:9}\n";
  const auto r = run_train("--config " + gpu.string() + " --output-dir " + (dir / "out").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(gpu.string() + ": training.device: " + lacking), std::string::npos)
      << r.output;
}

// A disk full at start-up left .lock and an empty train.log: afterwards --resume said "no
// checkpoint" and a new run "already holds a run".
TEST(Outcomes, ARunThatFailedAtStartUpCanBeStartedAgain) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r = run_shell("ulimit -f 0; " + std::string(TRAIN_BINARY) + " " + tiny_run(dir, run));
  EXPECT_EQ(r.code, 5) << r.output;
  r = run_train(tiny_run(dir, run));
  EXPECT_EQ(r.code, 0) << r.output;
}

// Inputs read as what they are: /dev/zero as a config was read until memory ran out; an empty
// --settings ran the default settings, an empty --output-dir trained into a new folder of runs/.
TEST(Outcomes, InputsThatAreNotWhatTheyClaimAreRefusedInOneLine) {
  test_support::TempDir dir;
  auto r = run_train("--config /dev/zero");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("/dev/zero: is not a regular file"), std::string::npos) << r.output;
  const std::string config = write_tiny_config(dir).string();
  // Sixteenth pass: a value of only blanks made a folder named " " (compare --output ' ').
  const std::string empty = "expected a value, got an empty string",
                    blanks = "expected a value, got only blanks";
  for (const auto& [arguments, said] : std::vector<std::pair<std::string, std::string>>{
           {"memory --config " + config + " --settings '' --output-dir study",
            "--settings: " + empty},
           {"--config " + config + " --output-dir ''", "--output-dir: " + empty},
           {"--config ''", "--config: " + empty},
           {"--config " + config + " --resume ''", "--resume: " + empty},
           {"sweep --config " + config + " --output-dir ''", "--output-dir: " + empty},
           {"report ''", "run_dir: " + empty},
           {"compare a b --output ' '", "--output: " + blanks},
           {"--config " + config + " --memory-limit ' '", "--memory-limit: " + blanks},
           {"--config ' '", "--config: " + blanks},
           {"bench matmul --threads ' '", "--threads: " + blanks},  // a number's flag too
           {"bench matmul --threads \"$(printf '\\t')\"", "--threads: " + blanks}}) {
    r = run_shell("cd " + dir.path().string() + " && " + TRAIN_BINARY + " " + arguments);
    EXPECT_EQ(r.code, 2) << arguments << ": " << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << arguments << ": " << r.output;
    EXPECT_NE(r.output.find(said), std::string::npos) << arguments << ": " << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / " "));
  EXPECT_FALSE(fs::exists(dir / "study"));
  EXPECT_FALSE(fs::exists(dir / "runs"));
}

// After kill -9 part-way through an epoch and a resume with another learning rate, TensorBoard
// showed the dead run's points beside the new ones; now the restart drops them (SessionLog START)
// and the resumed run writes them again.
TEST(Outcomes, TensorBoardAgreesWithTheMetricsAfterAKilledRunIsResumed) {
  if (!training::tensorboard_built()) GTEST_SKIP() << "built without protobuf / Boost.CRC";
  test_support::TempDir dir;
  const auto run = dir / "run";
  {
    cli::Background slow({"--config", write_tiny_config(dir, 2).string(), "--output-dir",
                          run.string(), "--set", "data.simulated_delay_ms=300"},
                         dir / "slow.log");
    ASSERT_TRUE(cli::wait_for_text(run / "train.log", "epoch 2/2  step 2/4"));
    slow.signal(SIGKILL);
    slow.wait();
  }
  auto r = run_train("--resume " + run.string() + " --set optimizer.lr=0.01");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_shell(std::string(TEST_PYTHON) + " " + PROJECT_SOURCE_DIR +
                "/scripts/read_tensorboard.py " + run.string() + " 2>/dev/null");
  if (r.code != 0) GTEST_SKIP() << "no tensorboard package for the reader";
  const auto scalars = nlohmann::json::parse(r.output);
  std::vector<int64_t> steps;
  for (const auto& point : scalars.at("train/lr")) steps.push_back(point.at(0).get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  // Steps 5 and 6 are the resumed run's, at its learning rate (0.01 at most), not the dead one's.
  for (const auto& point : scalars.at("train/lr")) {
    if (point.at(0).get<int64_t>() >= 5) {
      EXPECT_LE(point.at(1).get<double>(), 0.0100001);
    }
  }
}

// Two runs both named `run` gave two columns headed `run`.
TEST(Outcomes, RunsOfTheSameNameAreToldApartInAComparison) {
  test_support::TempDir dir;
  ASSERT_EQ(run_train(tiny_run(dir, dir / "a/run")).code, 0);
  ASSERT_EQ(run_train(tiny_run(dir, dir / "b/run")).code, 0);
  auto r = run_train("compare " + (dir / "a/run").string() + " " + (dir / "b/run").string() +
                     "/ --output " + (dir / "cmp").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find("| | " + (dir / "a/run").string() + " | " + (dir / "b/run").string() + " |"),
      std::string::npos)
      << r.output;
  // One run given twice gave two equal columns under one heading.
  r = run_train("compare " + (dir / "a/run").string() + " " + (dir / "a/../a/run").string() +
                " --output " + (dir / "cmp2").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find((dir / "a/../a/run").string() + ": given twice (also as " +
                          (dir / "a/run").string() + "); compare each run once"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "cmp2"));
}

// A synthetic split larger than the machine's memory was exit 1, "LibTorch error".
TEST(Outcomes, ASyntheticSplitLargerThanMemoryIsABadSize) {
  test_support::TempDir dir;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  meminfo >> key >> kib;            // "MemTotal: N kB"
  const int64_t images = 10000000;  // the largest data.synthetic_train_size accepted
  if (kib * 1024 >= images * 3072) GTEST_SKIP() << "this machine holds 10M images";
  const auto r = run_train(tiny_run(dir, dir / "run", "--set data.synthetic_train_size=10000000"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("data.synthetic_train_size: 10000000 images are"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

}  // namespace
