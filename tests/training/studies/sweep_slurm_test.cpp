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

// A task's result is its own only when it carries the array's job id and the task's index: a
// trials/NNN.json an earlier array's task wrote after this run removed it is not.
TEST(SweepSlurm, AResultCountsOnlyForTheArrayTaskThatWroteIt) {
  training::TrialResult result;
  result.job_id = "42";
  result.array_index = 3;
  EXPECT_TRUE(training::is_task_result(result, "42", 3));
  EXPECT_FALSE(training::is_task_result(result, "41", 3));  // an earlier array's
  EXPECT_FALSE(training::is_task_result(result, "42", 4));  // another task's
  EXPECT_FALSE(training::is_task_result(training::TrialResult{}, "", -1));
}

// A task that started no longer waits for Resources: that stale reason is dropped, a failure's
// kept; an ended task's run time is Slurm's EndTime - StartTime.
TEST(SweepSlurm, AStartedTaskSaysNoPendingReasonAndItsRunTimeIsSlurms) {
  const auto tasks = training::parse_scontrol_records(
      "JobId=9 ArrayJobId=7 ArrayTaskId=2 JobState=CANCELLED Reason=Resources ExitCode=0:15 "
      "NodeList=na StartTime=2026-12-05T23:59:58 EndTime=2026-12-06T00:00:05\n"
      "JobId=10 ArrayJobId=7 ArrayTaskId=3 JobState=CANCELLED Reason=Resources ExitCode=0:0 "
      "NodeList=(null) StartTime=Unknown EndTime=2026-12-06T00:00:05\n");
  EXPECT_EQ(tasks.at(2).describe(), "CANCELLED (exit code 0:15, killed by signal 15) on node na");
  EXPECT_EQ(tasks.at(2).elapsed_seconds, 7.0);
  EXPECT_EQ(tasks.at(3).describe(), "CANCELLED, reason Resources");  // it never ran
  EXPECT_EQ(tasks.at(3).elapsed_seconds, -1.0);
}

// The options sbatch would read as the sweep's own are refused with the config, in each form
// sbatch reads them; the others pass.
TEST(SweepSlurm, OptionsTheSweepOwnsAreRefusedWithTheConfigInEveryForm) {
  test_support::TempDir dir;
  const auto config = tiny_config(dir, "launcher: slurm");
  const std::vector<std::pair<std::string, std::string>> owned = {
      {"--array=1-3", "--array"},     {"--array", "--array"},       {"--arr=1", "--array"},
      {"-a", "-a (--array)"},         {"-a1-3", "-a (--array)"},    {"--wrap=true", "--wrap"},
      {"--test-only", "--test-only"}, {"--wait", "--wait"},         {"-W", "-W (--wait)"},
      {"-vW", "-W (--wait)"},         {"--parsable", "--parsable"}, {"--help", "--help"},
      {"-V", "-V (--version)"}};
  for (const auto& [item, option] : owned) {
    try {
      training::load_config(config.string(), {"sweep.slurm.options=[--nodes=1, " + item + "]"});
      ADD_FAILURE() << item << " was read";
    } catch (const training::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--set sweep.slurm.options: sweep.slurm.options: '" +
                                                item + "' is sbatch's " + option +
                                                ", which is the sweep's own: ",
                                            0),
                0u)
          << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_THROW(training::load_config(config.string(), {"sweep.slurm.options=[--]"}),
               training::ConfigError);
  for (const char* fine :
       {"--wait-all-nodes=1", "-pW", "--partition=gpu", "-N1", "--time=10", "-t", "--nodes"}) {
    EXPECT_NO_THROW(
        training::load_config(config.string(), {std::string("sweep.slurm.options=[") + fine + "]"}))
        << fine;
  }
}

// What sbatch said, the most specific line first; the options as given.
TEST(SweepSlurm, TheErrorLineIsTheMostSpecificAndTheOptionsAreShownAsGiven) {
  EXPECT_EQ(training::slurm_error("sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" "
                                  "for more information\n"),
            "sbatch: unrecognized option '--bogus'");
  EXPECT_EQ(training::slurm_error("sbatch: warning: x\nsbatch: error: Batch job submission "
                                  "failed: Unable to contact slurm controller\n"),
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller");
  EXPECT_EQ(training::slurm_error(""), "(no output)");
  EXPECT_EQ(training::options_text({"--partition debug", "", "--qos=low"}),
            "['--partition debug', '', --qos=low]");
  EXPECT_EQ(training::largest_array_index("AuthType = auth/munge\nMaxArraySize            = "
                                          "1001\nMaxJobCount = 10000\n"),
            1000);
  EXPECT_EQ(training::largest_array_index("nothing\n"), std::nullopt);
}

// Stand-ins for Slurm's commands: a grid larger than one array takes is refused before the
// folder exists, naming the count and the limit; a controller that does not answer is said as
// such, without blaming options that were not given.
TEST(SweepSlurm, AGridLargerThanAnArrayAndAnUnreachableControllerAreOneLineBeforeTheFolder) {
  test_support::TempDir dir;
  fs::create_directories(dir / "bin");
  auto tool = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir / "bin" / name) << "#!/bin/sh\n" << body;
    fs::permissions(dir / "bin" / name, fs::perms::owner_all);
  };
  tool("scontrol",
       "[ -f \"$0.down\" ] && { echo 'slurm_load_ctl_conf error: Unable to contact "
       "slurm controller (connect failure)'; exit 1; }\necho 'MaxArraySize = 3'\n");
  tool("sbatch",
       "echo 'sbatch: error: Batch job submission failed: Unable to contact slurm "
       "controller (connect failure)'; exit 1\n");
  tool("scancel", "exit 0\n");
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", ((dir / "bin").string() + ":" + path).c_str(), 1);
  auto refusal = [&](const std::string& batches) {
    const auto config = tiny_config(dir, "launcher: slurm");
    try {
      training::run_sweep({config.string(),
                           {"sweep.batch_sizes=" + batches},
                           (dir / "out").string(),
                           TRAIN_BINARY,
                           ""});
    } catch (const training::UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(refusal("[4, 8, 12]"),
            "sweep.launcher: slurm: the grid's 3 trials are more than one job array takes on this "
            "cluster (MaxArraySize 3: array indices up to 2); sweep fewer batch sizes or settings");
  EXPECT_EQ(refusal("[4, 8]"),
            "sweep.launcher: slurm: sbatch --test-only failed (no sweep.slurm.options given): "
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
            "(connect failure)");
  std::ofstream(dir / "bin" / "scontrol.down") << "";
  EXPECT_EQ(refusal("[4]"),
            "sweep.launcher: slurm: the Slurm controller did not answer (scontrol show config: "
            "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure))");
  ::setenv("PATH", path.c_str(), 1);
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// trials/NNN.json is read back as the trial wrote it: an ok trial measured a step at least, and no
// count or size is negative.
TEST(SweepSlurm, ATrialResultHoldingValuesNoTrialWritesIsRefusedNamingTheEntry) {
  training::TrialResult ok;
  ok.status = training::TrialStatus::Ok;
  ok.steps = 2;
  ok.steady_peak_allocated_bytes = ok.steady_peak_reserved_bytes = 1000;
  ok.median_step_seconds = 0.1;
  ok.images_per_second = 80;
  const auto good = training::to_json(ok);
  EXPECT_NO_THROW(training::trial_from_json(good));
  // An ok trial measured its steps: their figures are never null (a trial out of memory's are).
  for (const char* key : {"median_step_seconds", "images_per_second", "steady_peak_allocated_bytes",
                          "steady_peak_reserved_bytes"}) {
    nlohmann::json edited = good;
    edited[key] = nullptr;
    try {
      training::trial_from_json(edited);
      ADD_FAILURE() << key << " null accepted";
    } catch (const std::out_of_range& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string(key) + ": null, but an ok trial measured its steps");
    }
    edited["status"] = "oom";
    EXPECT_NO_THROW(training::trial_from_json(edited)) << key;
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"steps", "steps: 0 is not at least 1"},
      {"replayed_steps", "replayed_steps: -1 is not within [0, 2]"},
      {"outside_allocator_bytes", "outside_allocator_bytes: -1 is not within [0, "},
      {"predicted_peak_bytes", "predicted_peak_bytes: -1 is not within [0, "}};
  for (const auto& [key, message] : bad) {
    nlohmann::json edited = good;
    edited[key] = key == "steps" ? 0 : -1;
    try {
      training::trial_from_json(edited);
      ADD_FAILURE() << key << " accepted";
    } catch (const std::out_of_range& e) {
      EXPECT_EQ(std::string(e.what()).rfind(message, 0), 0u) << e.what();
    }
  }
}

}  // namespace
