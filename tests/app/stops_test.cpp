// Round 4 of the hostile pass (issue 39, docs/reliability.md): stops that lost a run, folders
// checked before their lock. Every test reproduced its case before the change that made it pass.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "app/cli_support.h"
#include "training/platform/dir_lock.h"

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

// Steps of 2 micro-batches (2 steps an epoch of the tiny config): a test's stop point comes
// between a step's micro-batches.
const char* const kTwoMicroBatches =
    "--set training.accumulate_steps=2 --set training.memory_format=contiguous";

// A tiny run of `epochs` epochs of two micro-batches a step, stopped at `at` (TRAIN_TEST_STOP_AT).
cli::Result stopped_tiny_run(const test_support::TempDir& dir, const fs::path& run, int epochs,
                             const std::string& at) {
  return run_shell("TRAIN_TEST_STOP_AT='" + at + "' " + std::string(TRAIN_BINARY) + " " +
                   tiny_run(dir, run, epochs, kTwoMicroBatches));
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

// A stop during start-up (before the graceful handlers; here after the run folder and its inputs
// are written, before the start checkpoint) exited 130 without a word (round 4). It says so in one
// line, and the run starts again from its config on --resume.
TEST(Stops, AStopWhileStartingUpSaysSoInOneLineAndTheRunResumes) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r = run_shell("TRAIN_TEST_STOP_AT=start-up " + std::string(TRAIN_BINARY) + " " +
                     tiny_run(dir, run, 1));
  EXPECT_EQ(r.code, 130) << r.output;
  EXPECT_NE(r.output.find("[stopped] by a signal (exit 130); nothing is half-written\n"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(rows(run), 0);
  // The run's log says it too (the hostile pass found train.log silent).
  EXPECT_NE(test_support::read_text(run / "train.log")
                .find("[stopped] by a signal (exit 130); nothing is half-written\n"),
            std::string::npos);
  r = run_train("--resume " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("has no checkpoint yet"), std::string::npos) << r.output;
  EXPECT_EQ(rows(run), 1);
}

// A run stopped before it wrote its config.yaml (between the folder and its inputs) was refused
// on --resume as "checkpoint.pt: missing; no checkpoint to resume from" (hostile pass 5), with no
// word of what to do. It says the run never started and how to start it; that works.
TEST(Stops, AResumeOfARunStoppedBeforeItsConfigSaysHowToStartItAgain) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  const std::string start = tiny_run(dir, run, 1);
  ASSERT_EQ(
      run_shell("TRAIN_TEST_STOP_AT=start-up " + std::string(TRAIN_BINARY) + " " + start).code,
      130);
  fs::remove(run / "config.yaml");
  fs::remove(run / "decisions.json");
  auto r = run_train("--resume " + run.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find(run.string() +
                          ": stopped before it wrote its config.yaml (no "
                          "checkpoint.pt either): nothing to resume; start it "
                          "again with --config FILE --output-dir " +
                          run.string()),
            std::string::npos)
      << r.output;
  r = run_train(start);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(rows(run), 1);
}

int occurrences(const std::string& text, const std::string& part) {
  int count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

// A resume stopped during its measurements before the first epoch (the layouts timed for
// training.memory_format: auto, the blocks measured for checkpointing.enabled: auto) said its line
// on the terminal only (hostile pass 5): the run's train.log, which a stop during training writes
// to, did not say it. It does now. A new run stopped there has no folder yet: the terminal only.
TEST(Stops, AResumeStoppedWhileItMeasuresSaysSoInItsLog) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  const std::string line = "[stopped] by a signal (exit 130); nothing is half-written\n";
  const std::string train = std::string(TRAIN_BINARY) + " ";
  auto r = run_shell("TRAIN_TEST_STOP_AT='layout timing' " + train + tiny_run(dir, run, 1));
  EXPECT_EQ(r.code, 130) << r.output;
  EXPECT_EQ(occurrences(r.output, line), 1) << r.output;
  EXPECT_FALSE(fs::exists(run));
  ASSERT_EQ(run_shell("TRAIN_TEST_STOP_AT=start-up " + train + tiny_run(dir, run, 1)).code, 130);
  // Resumed (from its config: no checkpoint yet), it times the layouts; then it measures the
  // blocks (its layout set).
  const std::vector<std::pair<std::string, std::string>> stops = {
      {"layout timing", ""},
      {"block measurement",
       " --set training.memory_format=contiguous --set checkpointing.enabled=auto"
       " --set checkpointing.budget=1GiB"}};
  int said = 1;
  for (const auto& [point, flags] : stops) {
    r = run_shell("TRAIN_TEST_STOP_AT='" + point + "' " + train + "--resume " + run.string() +
                  flags);
    EXPECT_EQ(r.code, 130) << point << ": " << r.output;
    EXPECT_EQ(occurrences(r.output, line), 1) << point << ": " << r.output;
    EXPECT_EQ(occurrences(test_support::read_text(run / "train.log"), line), ++said) << point;
  }
  // While another process holds the run, a resume is refused at its lock before it measures
  // anything (the tenth pass's F3: it timed the layouts first), and the log is that process's:
  // neither the refusal nor a stop's line is written into it.
  const int held = ::open((run / ".lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
  const std::string log = test_support::read_text(run / "train.log");
  r = run_shell("TRAIN_TEST_STOP_AT='layout timing' " + train + "--resume " + run.string());
  ::close(held);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("in use by another train process"), std::string::npos) << r.output;
  EXPECT_EQ(test_support::read_text(run / "train.log"), log);
  r = run_train("--resume " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(rows(run), 1);
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

// A stop after the study was written and its folder marked finished exited 130 (round 5: 3 of 9
// SIGINTs 4.2 s into `train memory --card`), and the same command into that folder was then
// refused as "already holds a memory study". The outputs are complete: the stop is too late, the
// exit 0. (The mechanism, for every command that marks a folder, is StopSignal's test.)
TEST(Stops, AStopAfterAStudyIsWrittenIsTooLateToStopIt) {
  test_support::TempDir dir;
  const auto study = dir / "study";
  const auto r = run_shell("TRAIN_TEST_STOP_AT='marked finished' " + std::string(TRAIN_BINARY) +
                           " memory --config " + write_tiny_config(dir).string() +
                           " --card T4 --card-only --settings fp32 --output-dir " + study.string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("[stopped]"), std::string::npos) << r.output;
  EXPECT_NE(test_support::read_text(study / ".train-output").find("finished"), std::string::npos);
  EXPECT_TRUE(fs::exists(study / "memory_breakdown.json"));
}

// A second `train --output-dir X` while X trains said "already holds a run ... continue it with
// --resume X" (refused too), and a second sweep into a running sweep's folder said it "stopped
// before it finished; starting it again": the folder's contents were judged before its lock;
// `compare RUN --output RUN` said RUN was "not a run directory" while RUN had no epoch written.
// The holder is named first, for every kind of output folder.
TEST(Stops, ASecondCommandIntoAFolderBeingWrittenNamesItsHolder) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  cli::Background first({"--config", write_tiny_config(dir, 20).string(), "--output-dir",
                         run.string(), "--set", "data.simulated_delay_ms=1000"},
                        dir / "first.log");
  ASSERT_TRUE(cli::wait_for_text(run / "train.log", "step 1/4"));
  const std::string holder =
      "in use by another train process (pid " + std::to_string(first.pid()) + ")";
  const std::string config = " --config " + write_tiny_config(dir).string();
  const std::string into = " --output-dir " + run.string();
  // (train memory's settings given: its default leaves bf16 out, with a warning, on a CPU without
  // native bf16.)
  // (compare first, while the run has no epoch written: its run was read before its --output's
  // lock, "not a run directory".)
  for (const std::string& args : {"compare " + run.string() + " --output " + run.string(),
                                  config + into, "sweep --batch-sizes 4" + config + into,
                                  "memory --settings fp32,fp32+checkpointing" + config + into}) {
    const auto r = run_train(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find(holder), std::string::npos) << args << ": " << r.output;
  }
  first.signal(SIGKILL);
  first.wait();
}

// MASTER_PORT already in use on rank 0's host: "could not reach the other ranks ... is every rank
// started", with the cause ("failed to listen") buried at the end of LibTorch's text.
TEST(Stops, AMasterPortInUseSaysItCannotListen) {
  test_support::TempDir dir;
  const int busy = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(busy, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(busy, 1), 0);
  socklen_t size = sizeof address;
  ::getsockname(busy, reinterpret_cast<sockaddr*>(&address), &size);
  const std::string port = std::to_string(ntohs(address.sin_port));
  const auto r =
      run_shell("WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " +
                std::string(TRAIN_BINARY) + " --config " + write_tiny_config(dir).string() +
                " --set distributed.timeout_seconds=5 --output-dir " + (dir / "run").string());
  ::close(busy);
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("rank 0: cannot host the store on 127.0.0.1:" + port +
                          ": failed to listen (address already in use)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("is every rank started"), std::string::npos) << r.output;
}

// Issue 51, the eighth pass: `timeout -s INT 7 train sweep ...` often ended "by a second signal,
// at once", sweep.md not saying it stopped and the stopped trial's file left beside a sweep.json
// without it: GNU timeout signals the process and then its process group, microseconds apart.
// One stop, stopped as any: the tables say so (the mechanism: StopSignal's test).
TEST(Stops, AStopSentToTheProcessAndItsGroupAsTimeoutDoesIsOneStop) {
  test_support::TempDir dir;
  std::ofstream(dir / "sweep.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                       "data: {source: synthetic, synthetic_train_size: 256, "
                                       "synthetic_test_size: 64}\n"
                                       "training: {device: cpu, threads: 1}\n"
                                       "sweep: {warmup_steps: 0, measure_steps: 20}\n";
  // Trial 1 (batch 2) is short; trial 2 (batch 128) runs long enough to be stopped.
  const auto sweep = dir / "sweep";
  cli::Background running({"sweep", "--config", (dir / "sweep.yaml").string(), "--batch-sizes",
                           "2,128", "--output-dir", sweep.string()},
                          dir / "sweep.log", /*own_group=*/true);
  ASSERT_TRUE(cli::wait_for_text(dir / "sweep.log", "[1] "));
  ASSERT_TRUE(cli::wait_for_file(sweep / "trials/002.log")) << "trial 2 did not start";
  running.stop_as_timeout_does(SIGINT);
  EXPECT_EQ(running.wait(), 130);
  const auto log = test_support::read_text(dir / "sweep.log");
  EXPECT_EQ(log.find("second signal"), std::string::npos) << log;
  EXPECT_NE(log.find("sweep stopped by signal after 1 trial(s)"), std::string::npos) << log;
  const auto md = test_support::read_text(sweep / "sweep.md");
  EXPECT_NE(md.find("stopped by a signal after 1 trial(s)"), std::string::npos) << md;
}

// Issue 51, the eighth pass: "continue with: train --resume runs/tt" from `./build/train`: no
// `train` is on PATH. Advice names the program as it was run, one shell word (here a relative
// path with a space, run from its folder), and typed back it continues the run.
TEST(Stops, AdviceNamesTheProgramAsItWasRun) {
  test_support::TempDir dir;
  fs::create_directories(dir / "my bin");
  fs::create_symlink(TRAIN_BINARY, dir / "my bin" / "train");
  const std::string in_dir = "cd " + dir.path().string() + " && ";
  // (A stop is taken between a step's micro-batches.)
  auto r = run_shell(in_dir + "TRAIN_TEST_STOP_AT='step 2 micro-batch 2' './my bin/train' " +
                     tiny_run(dir, "run", 1, kTwoMicroBatches));
  ASSERT_EQ(r.code, 130) << r.output;
  const std::string advice = "'./my bin/train' --resume run";
  EXPECT_NE(r.output.find("continue with: " + advice + "\n"), std::string::npos) << r.output;
  r = run_shell(in_dir + advice);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(rows(dir / "run"), 1);
}

// Twelfth pass: `train compare` on a run stopped in its first epoch (resumable, no epoch recorded)
// said "not a run directory"; it says what the run is, as `train report` does.
TEST(Stops, ARunStoppedInItsFirstEpochIsNamedAsSuchByCompare) {
  test_support::TempDir dir;
  const auto run = dir / "first";
  auto r = stopped_tiny_run(dir, run, 1, "step 2 micro-batch 2");
  ASSERT_EQ(r.code, 130) << r.output;
  r = run_train("compare " + run.string() + " --output " + (dir / "cmp").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  const std::string continued =
      "; continue it with: " + std::string(TRAIN_BINARY) + " --resume " + run.string() + "\n";
  EXPECT_NE(r.output.find(run.string() + ": a run with no epoch recorded yet (no metrics.jsonl "
                                         "rows: training, or stopped in its first epoch), so "
                                         "nothing to compare" +
                          continued),
            std::string::npos)
      << r.output;
  // Thirteenth pass: `train report` said "no run to report on"; it says the same, and how to go on.
  r = run_train("report " + run.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find(run.string() + ": a run with no epoch recorded yet"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("so nothing to report" + continued), std::string::npos) << r.output;
}

// Issue 51, the eighth pass: a stopped run's report.md gave epoch 1's accuracy as the "final"
// one, and said neither that the run stopped nor how to continue it (a diverged run has its row).
TEST(Stops, AStoppedRunsReportSaysWhereItStoppedAndHowToContinue) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r = stopped_tiny_run(dir, run, 2, "step 4 micro-batch 2");
  ASSERT_EQ(r.code, 130) << r.output;
  ASSERT_EQ(rows(run), 1);
  const std::string row =
      "| **stopped** | in epoch 2 after step 3, before the end of its 2 "
      "epoch(s): the figures below are of the 1 epoch(s) recorded; continue "
      "with: " +
      std::string(TRAIN_BINARY) + " --resume " + run.string() + " |";
  EXPECT_NE(test_support::read_text(run / "report.md").find(row), std::string::npos)
      << test_support::read_text(run / "report.md");
  {  // The eighth pass's "left": `train report` while a train process holds the run said stopped.
    const training::DirectoryLock training_it(run);
    r = run_train("report " + run.string());
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string report = test_support::read_text(run / "report.md");
    EXPECT_EQ(report.find("**stopped**"), std::string::npos) << report;
    EXPECT_NE(report.find("| **training** | another train process holds the run now: the figures "
                          "below are of the 1 epoch(s) recorded so far, of its 2 |"),
              std::string::npos)
        << report;
    r = run_train("compare " + run.string() + " --output " + (dir / "cmp0").string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(test_support::read_text(dir / "cmp0/compare.md")
                  .find("| stopped | training now (another train process holds the run) |"),
              std::string::npos);
  }
  // A ninth pass: `train report run` from the run's folder wrote "--resume run", a path that holds
  // from there alone; the file is read from anywhere, so its advice names the absolute path.
  r = run_shell("cd " + dir.path().string() + " && " + TRAIN_BINARY + " report run");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(test_support::read_text(run / "report.md").find(row), std::string::npos)
      << test_support::read_text(run / "report.md");
  // A ninth pass: `train compare` gave the stopped run's last epoch as its final accuracy, and
  // said nothing of the stop.
  r = run_train("compare " + run.string() + " --output " + (dir / "cmp").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(test_support::read_text(dir / "cmp/compare.md")
                .find("| stopped | in epoch 2 after step 3, before the end of its 2 epoch(s) |"),
            std::string::npos)
      << test_support::read_text(dir / "cmp/compare.md");
  r = run_train("--resume " + run.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(test_support::read_text(run / "report.md").find("**stopped**"), std::string::npos);
  r = run_train("compare " + run.string() + " --output " + (dir / "cmp2").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(test_support::read_text(dir / "cmp2/compare.md").find("| stopped | no |"),
            std::string::npos);
}

}  // namespace
