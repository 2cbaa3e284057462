// The Slurm launcher's parts that need no cluster: reading scontrol's records, a task's row, and
// the refusals before anything is written or submitted (tests/scripts/slurm_test.py runs it on a
// real cluster).
#include "training/studies/sweep_slurm.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "training/config/config.h"
#include "training/platform/errors.h"
#include "training/studies/sweep.h"

namespace {

namespace fs = std::filesystem;

TEST(SweepSlurm, ScontrolRecordsGiveEachTasksStateExitCodeAndNode) {
  const std::string text =
      "JobId=11 ArrayJobId=7 ArrayTaskId=3-5,8%2 JobName=train-sweep JobState=PENDING "
      "Reason=Resources Dependency=(null) ExitCode=0:0 NodeList= Command=/a b/c\n"
      "JobId=9 ArrayJobId=7 ArrayTaskId=2 JobState=FAILED Reason=NonZeroExitCode ExitCode=0:9 "
      "NodeList=nb BatchHost=nb\n"
      "JobId=7 ArrayJobId=7 ArrayTaskId=1 JobState=COMPLETED Reason=None ExitCode=0:0 "
      "NodeList=na\n";
  const auto tasks = training::parse_scontrol_records(text);
  ASSERT_EQ(tasks.size(), 6u);
  for (int64_t pending : {3, 4, 5, 8}) {
    EXPECT_EQ(tasks.at(pending).state, "PENDING");
    EXPECT_FALSE(tasks.at(pending).ended());
    EXPECT_EQ(tasks.at(pending).node, "");
  }
  EXPECT_EQ(tasks.at(2).describe(),
            "FAILED (exit code 0:9, killed by signal 9) on node nb, reason NonZeroExitCode");
  EXPECT_TRUE(tasks.at(2).ended());
  EXPECT_EQ(tasks.at(1).describe(), "COMPLETED on node na");
  EXPECT_TRUE(training::SlurmTask{}.ended());  // no longer known to Slurm
  EXPECT_EQ(training::SlurmTask{}.describe(), "ended, no longer known to Slurm");
}

TEST(SweepSlurm, ATaskWithoutAResultIsAnErrorRowSayingWhereAndHow) {
  test_support::TempDir dir;
  std::ofstream(dir / "004.log") << "epoch\nKilled\n";
  training::SlurmTask task{"NODE_FAIL", "0:0", "nb", "NodeDown"};
  const auto row = training::failed_task_result(task, "42", 4, dir / "004.log");
  EXPECT_EQ(row.status, training::TrialStatus::Error);
  EXPECT_EQ(row.message, "slurm task 42_4: NODE_FAIL on node nb, reason NodeDown: Killed");
  EXPECT_EQ(row.host, "nb");
  EXPECT_EQ(row.job_id, "42");
  EXPECT_EQ(row.array_index, 4);
}

fs::path tiny_config(const test_support::TempDir& dir, const std::string& sweep) {
  std::ofstream(dir / "sweep.yaml") << "model: {arch: resnet18, stem: imagenet}\n"
                                       "training: {device: cpu, threads: 1}\n"
                                       "sweep: {batch_sizes: [8], warmup_steps: 0, "
                                       "measure_steps: 1, "
                                    << sweep << "}\n";
  return dir / "sweep.yaml";
}

// Without Slurm's commands: one line naming the missing one, nothing written.
TEST(SweepSlurm, WithoutSbatchTheSweepIsRefusedBeforeItsFolderExists) {
  test_support::TempDir dir;
  const auto config = tiny_config(dir, "launcher: slurm");
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  fs::create_directories(dir / "empty-bin");
  ::setenv("PATH", (dir / "empty-bin").c_str(), 1);
  try {
    training::run_sweep({config.string(), {}, (dir / "out").string(), TRAIN_BINARY, ""});
    ADD_FAILURE() << "no error";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "sweep.launcher: slurm: sbatch is not on PATH (install Slurm's client commands, or "
              "run the sweep with --launcher local)");
  }
  ::setenv("PATH", path.c_str(), 1);
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(SweepSlurm, KeysThatDoNotCombineWithSlurmAreRefused) {
  test_support::TempDir dir;
  for (const std::string& keys : {std::string("launcher: slurm, devices: [0]"),
                                  std::string("launcher: slurm, find_max: true"),
                                  std::string("launcher: slurm, time_budget: 60")}) {
    EXPECT_THROW(training::load_config(tiny_config(dir, keys).string()), training::ConfigError)
        << keys;
  }
}

// Issue 54's spelling, sweep.slurm.options, from the file and from --set; written and read back
// as it was. The name it first shipped as is refused like any unknown key, pointing to it.
TEST(SweepSlurm, TheOptionsAreTheKeySweepSlurmOptions) {
  test_support::TempDir dir;
  const std::vector<std::string> options = {"--partition=gpu", "--gres=gpu:1"};
  const auto config = training::load_config(
      tiny_config(dir, "launcher: slurm, slurm: {options: [--partition=gpu, --gres=gpu:1]}")
          .string());
  EXPECT_EQ(config.sweep.slurm.options, options);
  EXPECT_EQ(training::parse_config(training::to_yaml(config), "again").sweep.slurm.options,
            options);
  const auto set = training::load_config(tiny_config(dir, "launcher: slurm").string(),
                                         {"sweep.slurm.options=[--partition=gpu, --gres=gpu:1]"});
  EXPECT_EQ(set.sweep.slurm.options, options);
  EXPECT_EQ(training::to_yaml(set), training::to_yaml(config));
  const auto old = tiny_config(dir, "launcher: slurm, slurm_options: [--partition=gpu]");
  try {
    training::load_config(old.string());
    ADD_FAILURE() << "sweep.slurm_options was read";
  } catch (const training::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), old.string() +
                                         ": unknown key 'sweep.slurm_options' (did you mean "
                                         "'sweep.slurm.options'?)");
  }
}

// On the CPU, trials stay serial: sweep.devices is refused, naming the key.
TEST(SweepSlurm, OneTrialPerGpuIsRefusedOnTheCpu) {
  test_support::TempDir dir;
  const auto config = tiny_config(dir, "devices: [0, 1]");
  try {
    training::run_sweep({config.string(), {}, (dir / "out").string(), TRAIN_BINARY, ""});
    ADD_FAILURE() << "no error";
  } catch (const training::UserError& e) {  // named where the key was set
    EXPECT_EQ(std::string(e.what()), config.string() +
                                         ": sweep.devices: one trial per GPU is for a sweep on "
                                         "CUDA; on the CPU trials run one at a time (their "
                                         "timings would disturb each other): drop "
                                         "sweep.devices (--gpus)");
  }
  EXPECT_FALSE(fs::exists(dir / "out"));
}

}  // namespace
