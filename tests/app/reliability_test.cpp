// Faults and hostile input against the `train` executable: nothing already written is lost,
// nothing silently wrong is accepted, every refusal is one line with its documented exit code.
// Each test reproduces one case of docs/reliability.md.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "app/cli_support.h"

namespace {

namespace fs = std::filesystem;
using cli::count_lines;
using cli::processes_running_with;
using cli::run_shell;
using cli::run_train;
using cli::write_tiny_config;

// The error lines of an output.
std::vector<std::string> errors_in(const std::string& output) {
  std::vector<std::string> errors;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("[error]") != std::string::npos) errors.push_back(line);
  }
  return errors;
}

// A tiny run that trains slowly (0.3 s per batch), so other processes can meet it running.
std::vector<std::string> slow_run(const test_support::TempDir& dir, const fs::path& run) {
  return {"--config", write_tiny_config(dir, 20).string(), "--output-dir", run.string(),
          "--set",    "data.simulated_delay_ms=300"};
}

TEST(Reliability, SweepRefusesADirectoryHoldingATrainingRun) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir);
  ASSERT_EQ(
      run_train("--config " + config.string() + " --output-dir " + (dir / "run").string()).code, 0);
  const auto before = test_support::read_text(dir / "run/config.yaml");
  const auto r = run_train("sweep --config " + config.string() + " --output-dir " +
                           (dir / "run").string() + " --batch-sizes 4");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("already holds a run"), std::string::npos) << r.output;
  EXPECT_EQ(test_support::read_text(dir / "run/config.yaml"), before);
  EXPECT_FALSE(fs::exists(dir / "run/sweep.json"));
}

TEST(Reliability, ASecondWriterIsRefusedNamingTheHolderAndADeadHolderReleasesTheLock) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  cli::Background first(slow_run(dir, run), dir / "first.log");
  ASSERT_TRUE(cli::wait_for_text(run / "train.log", "step 1/4"));
  auto r = run_train("--resume " + run.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(
      r.output.find("in use by another train process (pid " + std::to_string(first.pid()) + ")"),
      std::string::npos)
      << r.output;
  // kill -9: the operating system releases the lock with the process.
  first.signal(SIGKILL);
  first.wait();
  r = run_train("--resume " + run.string() +
                " --set training.epochs=1 --set data.simulated_delay_ms=0");
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST(Reliability, ADamagedCheckpointIsRefusedBeforeLoading) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  ASSERT_EQ(
      run_train("--config " + write_tiny_config(dir).string() + " --output-dir " + run.string())
          .code,
      0);
  std::string bytes = test_support::read_text(run / "checkpoint.pt");
  bytes[bytes.size() / 2] ^= 0x10;  // one bit in the middle of the weights
  std::ofstream(run / "checkpoint.pt", std::ios::binary) << bytes;
  auto r = run_train("--resume " + run.string() + " --set training.epochs=2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("checkpoint.pt: damaged checkpoint: SHA-256"), std::string::npos)
      << r.output;
  // Truncated (a copy cut short) is refused the same way.
  std::ofstream(run / "checkpoint.pt", std::ios::binary) << bytes.substr(0, bytes.size() - 100);
  r = run_train("--resume " + run.string() + " --set training.epochs=2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("damaged checkpoint: the header says"), std::string::npos) << r.output;
}

TEST(Reliability, ADirectoryGivenAsConfigIsRefused) {
  test_support::TempDir dir;
  const auto r =
      run_train("--config " + dir.path().string() + " --output-dir " + (dir / "run").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find(dir.path().string() + ": is a directory, expected a YAML config file"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

TEST(Reliability, AMidEpochResumeAtAnotherBatchSizeIsRefused) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  // Stopped after 2 of the 4 batches of epoch 1.
  ASSERT_EQ(run_train("--config " + write_tiny_config(dir).string() + " --output-dir " +
                      run.string() + " --set training.max_steps=2")
                .code,
            0);
  const auto r = run_train("--resume " + run.string() +
                           " --set training.max_steps=0 --set training.batch_size=16");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("stopped 2 batches into epoch 1 at batch size 32"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Resume with training.batch_size=32"), std::string::npos) << r.output;
  EXPECT_EQ(run_train("--resume " + run.string() + " --set training.max_steps=0").code, 0);
}

TEST(Reliability, AProfilerWindowPastTheLastStepWritesWhatWasTracedOrIsRefused) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir, 2).string();  // 8 steps
  auto r = run_train("--config " + config + " --output-dir " + (dir / "cut").string() +
                     " --set profiler.enabled=true --set profiler.steps=[5,7]" +
                     " --set training.max_steps=6");
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir / "cut/trace.json");
  const auto trace = nlohmann::json::parse(in);
  std::set<std::string> steps;
  for (const auto& event : trace.at("traceEvents")) {
    const auto name = event.value("name", std::string());
    if (name.rfind("ProfilerStep#", 0) == 0) steps.insert(name);
  }
  EXPECT_EQ(steps, (std::set<std::string>{"ProfilerStep#5", "ProfilerStep#6"}));
  EXPECT_NE(test_support::read_text(dir / "cut/train.log")
                .find("profiler: the run ended at step 6, inside the window 5..7"),
            std::string::npos);

  r = run_train("--config " + config + " --output-dir " + (dir / "late").string() +
                " --set profiler.enabled=true --set profiler.steps=[9,10]");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("profiler.steps: the window starts at step 9, but this run makes 8"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "late"));
}

// `ulimit -f` makes writing past a size fail like a full disk (EFBIG): the checkpoint (45 MiB
// for ResNet-18) cannot be written, the small files can.
TEST(Reliability, AFullDiskWhileCheckpointingIsExitFiveAndKeepsThePreviousCheckpoint) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  ASSERT_EQ(
      run_train("--config " + write_tiny_config(dir).string() + " --output-dir " + run.string())
          .code,
      0);
  const auto checkpoint = test_support::read_text(run / "checkpoint.pt");
  const auto r = run_shell("ulimit -f 20000; " + std::string(TRAIN_BINARY) + " --resume " +
                           run.string() + " --set training.epochs=2");
  EXPECT_EQ(r.code, 5) << r.output;
  const auto errors = errors_in(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_NE(errors[0].find("checkpoint.pt: could not write (File too large)"), std::string::npos)
      << errors[0];
  EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << r.output;
  EXPECT_EQ(test_support::read_text(run / "checkpoint.pt"), checkpoint);
  for (const auto& entry : fs::directory_iterator(run)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST(Reliability, SigtermToASweepStopsItsTrialAndWritesWhatWasMeasured) {
  test_support::TempDir dir;
  std::ofstream(dir / "sweep.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                       "training: {device: cpu}\n"
                                       "sweep: {warmup_steps: 0, measure_steps: 20}\n";
  // Trial 1 (batch 1) finishes in a second; trial 2 (batch 256) would run for minutes.
  cli::Background sweep({"sweep", "--config", (dir / "sweep.yaml").string(), "--batch-sizes",
                         "1,256", "--output-dir", (dir / "sweep").string()},
                        dir / "sweep.log");
  ASSERT_TRUE(cli::wait_for_text(dir / "sweep.log", "[1] "));
  ASSERT_TRUE(cli::wait_for_file(dir / "sweep/trials/002.log")) << "trial 2 did not start";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  sweep.signal(SIGTERM);
  EXPECT_EQ(sweep.wait(), 130) << test_support::read_text(dir / "sweep.log");
  const auto csv = test_support::read_text(dir / "sweep/sweep.csv");
  EXPECT_EQ(count_lines(csv), 2) << csv;  // the header and trial 1
  EXPECT_NE(test_support::read_text(dir / "sweep.log").find("sweep stopped by signal after 1"),
            std::string::npos);
  // No trial process is left running.
  EXPECT_EQ(processes_running_with(dir / "sweep/trials/002.yaml"), 0);
}

TEST(Reliability, RefusalsComeBeforeTheRunDirectoryExists) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir).string();
  auto r = run_train("--config " + config + " --output-dir " + (dir / "big").string() +
                     " --set training.batch_size=1000");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is larger than the training set"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "big"));
  r = run_train("--config " + config + " --output-dir " + (dir / "classes").string() +
                " --set model.num_classes=5");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(fs::exists(dir / "classes"));
}

TEST(Reliability, ARunKilledBeforeItsFirstCheckpointCanBeResumed) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  {
    cli::Background first(slow_run(dir, run), dir / "first.log");
    ASSERT_TRUE(cli::wait_for_text(run / "train.log", "step 1/4"));
    first.signal(SIGKILL);
    first.wait();
  }
  ASSERT_FALSE(fs::exists(run / "checkpoint.pt"));
  // A temporary an interrupted write would leave behind.
  std::ofstream(run / ".checkpoint.pt.tmp999999") << "half a checkpoint";
  auto r =
      run_train("--config " + write_tiny_config(dir).string() + " --output-dir " + run.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("continue it with --resume"), std::string::npos) << r.output;
  r = run_train("--resume " + run.string() + " --set training.epochs=1" +
                " --set data.simulated_delay_ms=0");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(test_support::read_text(run / "train.log").find("has no checkpoint yet"),
            std::string::npos);
  EXPECT_TRUE(fs::exists(run / "checkpoint.pt"));
  EXPECT_FALSE(fs::exists(run / ".checkpoint.pt.tmp999999"));
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 1);
}

TEST(Reliability, PathsThatCannotBeUsedAreNamedWithExitTwo) {
  test_support::TempDir dir;
  // train.log is a folder.
  fs::create_directories(dir / "run/train.log");
  auto r = run_train("--config " + write_tiny_config(dir).string() + " --output-dir " +
                     (dir / "run").string());
  EXPECT_EQ(r.code, 2) << r.output;
  // (Refused as the folder is claimed: a folder named train.log is none of a run's files.)
  EXPECT_NE(r.output.find((dir / "run").string() + ": holds files that are not a run (train.log)"),
            std::string::npos)
      << r.output;
  // The matmul bench's --output is a folder.
  fs::create_directories(dir / "out.json");
  r = run_train("bench matmul --size 8 --repeats 1 --output " + (dir / "out.json").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find((dir / "out.json").string() + ": cannot write (Is a directory)"),
            std::string::npos)
      << r.output;
  // Image folders with a loop of symbolic links.
  fs::create_directories(dir / "loop/train/cat");
  fs::create_directory_symlink(dir / "loop/train", dir / "loop/train/cat/again");
  fs::create_directory_symlink("nowhere", dir / "loop/test");
  r = run_train("--config " + write_tiny_config(dir).string() + " --output-dir " +
                (dir / "run2").string() +
                " --set data.source=images --set data.root=" + (dir / "loop").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
}

TEST(Reliability, FlagsAreNamedInTheirErrors) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir).string();
  auto r = run_train("--config " + config + " --device cdua");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--device: training.device: expected auto, cpu, cuda or cuda:<index>"),
            std::string::npos)
      << r.output;
  r = run_train("--config " + config + " --set foo.bar=1");
  EXPECT_NE(r.output.find("--set foo: unknown section 'foo'"), std::string::npos) << r.output;
  r = run_train("sweep --config " + config + " --batch-sizes ''");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--batch-sizes: expected a value, got an empty string"),
            std::string::npos)
      << r.output;
  r = run_train("sweep --config " + config + " --memory-limit 12apples");
  EXPECT_NE(r.output.find("--memory-limit: memory.limit: expected a size"), std::string::npos)
      << r.output;
  r = run_train("bench matmul --size 8 --peak cpu:fp32=0");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--peak: expected a peak above 0 GFLOP/s"), std::string::npos)
      << r.output;
}

TEST(Reliability, AnUnreachableRankSaysSoInOneLine) {
  test_support::TempDir dir;
  const auto r = run_shell(
      "WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 "
      "MASTER_PORT=1 " +
      std::string(TRAIN_BINARY) + " --config " + write_tiny_config(dir).string() +
      " --set distributed.timeout_seconds=1");
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("rank 1: could not reach the other ranks"), std::string::npos)
      << r.output;
}

TEST(Reliability, OutOfMemoryInTheMatmulBenchIsExitThreeAndKeepsTheOtherRows) {
  test_support::TempDir dir;
  const auto r = run_train(
      "bench matmul --size 64,4096 --repeats 1 --memory-limit 100MiB"
      " --output " +
      (dir / "m.json").string());
  EXPECT_EQ(r.code, 3) << r.output;
  std::ifstream in(dir / "m.json");
  const auto rows = nlohmann::json::parse(in);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].at("available").get<bool>());
  EXPECT_TRUE(rows[1].at("out_of_memory").get<bool>());
  EXPECT_NE(r.output.find("cpu fp32 N=4096 ran out of memory"), std::string::npos) << r.output;
}

}  // namespace
