// The Slurm launcher's re-runs and results on a stand-in Slurm (sbatch runs each array task at
// once, in turn; scontrol shows what it recorded) and a stand-in trial that writes the result a
// task writes, with its job id and index: what is accepted as a task's result, what a re-run
// keeps and removes, a stop after the last task. tests/scripts/slurm_test.py runs the real one.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "training/config/config.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"
#include "training/studies/sweep.h"

namespace {

namespace fs = std::filesystem;

// A trial's result as `train sweep-trial` writes it, printf's arguments after it: the peak
// (bytes), the job id and the array index.
const char* const kResult =
    "'{\"status\":\"ok\",\"message\":\"\",\"peak_allocated_bytes\":%d,\"peak_reserved_bytes\":%d,"
    "\"steady_peak_allocated_bytes\":%d,\"steady_peak_reserved_bytes\":%d,"
    "\"median_step_seconds\":0.1,\"images_per_second\":10,\"steps\":1,\"replayed_steps\":0,"
    "\"outside_allocator_bytes\":0,\"recomputed_blocks\":null,\"predicted_peak_bytes\":0,"
    "\"host\":\"fake\",\"job_id\":\"%s\",\"array_index\":%d}\\n'";

class SweepSlurmRerun : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "bin");
    fs::create_directories(dir_ / "state");
    write_tool("sbatch",
               "state=\"$FAKE_SLURM\"; array=; script=\n"
               "for a in \"$@\"; do case \"$a\" in --test-only) exit 0;; --array=*) "
               "array=\"${a#--array=}\";; -*) ;; *) script=\"$a\";; esac; done\n"
               "job=$(( $(cat \"$state/next\" 2>/dev/null || echo 100) + 1 )); echo $job > "
               "\"$state/next\"\n"
               "trials=$(dirname \"$(dirname \"$script\")\")/trials\n"
               "for i in $(echo \"$array\" | tr , ' '); do\n"
               "  if [ \"$i\" = \"$FAKE_OLD_RESULT\" ]; then  # an earlier array's task writes it\n"
               "    printf " +
                   std::string(kResult) +
                   " 1 1 1 1 7 $i > \"$trials/$(printf %03d $i).json\"; code=1\n"
                   "  elif [ \"$i\" = \"$FAKE_FAIL\" ]; then code=1  # fails without a result\n"
                   "  else SLURM_ARRAY_JOB_ID=$job SLURM_ARRAY_TASK_ID=$i sh \"$script\"; "
                   "code=$?; fi\n"
                   "  st=COMPLETED; [ $code -ne 0 ] && st=FAILED\n"
                   "  echo \"JobId=$job ArrayJobId=$job ArrayTaskId=$i JobState=$st "
                   "Reason=None ExitCode=$code:0 NodeList=fake StartTime=2026-12-05T18:00:00 "
                   "EndTime=2026-12-05T18:00:03\" >> \"$state/job-$job\"\n"
                   "done\n"
                   "[ -n \"$FAKE_STOP\" ] && kill -TERM $PPID\n"
                   "echo $job\n");
    write_tool("scontrol",
               "[ \"$*\" = 'show config' ] && { echo 'MaxArraySize            = 1001'; exit 0; }\n"
               "f=\"$FAKE_SLURM/job-${4%%_*}\"\n"
               "[ -f \"$f\" ] || { echo 'slurm_load_jobs error: Invalid job id specified'; exit "
               "1; }\n"
               "cat \"$f\"\n");
    write_tool("scancel", "exit 0\n");
    std::ofstream(dir_ / "train.sh") << "#!/bin/sh\n"
                                        "b=$(grep -E '^  batch_size: ' \"$3\" | awk '{print $2}')\n"
                                        "printf "
                                     << kResult
                                     << " $((b*1000)) $((b*1000)) $((b*1000)) $((b*1000)) "
                                        "\"$SLURM_ARRAY_JOB_ID\" \"$SLURM_ARRAY_TASK_ID\" > "
                                        "\"$5\"\n";
    fs::permissions(dir_ / "train.sh", fs::perms::owner_all);
    path_ = std::getenv("PATH") ? std::getenv("PATH") : "";
    ::setenv("PATH", ((dir_ / "bin").string() + ":" + path_).c_str(), 1);
    ::setenv("FAKE_SLURM", (dir_ / "state").c_str(), 1);
  }
  void TearDown() override {
    ::setenv("PATH", path_.c_str(), 1);
    for (const char* name : {"FAKE_SLURM", "FAKE_OLD_RESULT", "FAKE_STOP", "FAKE_FAIL"})
      ::unsetenv(name);
    training::clear_stop_request();
  }

  void write_tool(const std::string& name, const std::string& body) const {
    std::ofstream(dir_ / "bin" / name) << "#!/bin/sh\n" << body;
    fs::permissions(dir_ / "bin" / name, fs::perms::owner_all);
  }

  int sweep(const std::string& batches, const std::vector<training::Override>& overrides = {},
            const std::string& card = "") const {
    std::ofstream(dir_ / "sweep.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                          "training: {device: cpu, threads: 1}\n"
                                          "sweep: {launcher: slurm, batch_sizes: "
                                       << batches << ", warmup_steps: 0, measure_steps: 1}\n";
    return training::run_sweep({(dir_ / "sweep.yaml").string(), overrides, out().string(),
                                (dir_ / "train.sh").string(), card});
  }

  fs::path out() const { return dir_ / "out"; }
  nlohmann::json trials() const {
    return nlohmann::json::parse(std::ifstream(out() / "sweep.json")).at("trials");
  }

  test_support::TempDir dir_;
  std::string path_;
};

// An earlier array's task (a stopped sweep's, outliving it) writes trials/002.json after this
// run removed it, and this array's task 2 fails: the file is not task 2's result.
TEST_F(SweepSlurmRerun, AResultAnotherArrayWroteIsNotThisTasksResult) {
  ::setenv("FAKE_OLD_RESULT", "2", 1);
  EXPECT_EQ(sweep("[8, 16]"), training::kExitTrialsFailed);
  const auto rows = trials();
  EXPECT_EQ(rows[0].at("status"), "ok");
  EXPECT_EQ(rows[0].at("job_id"), "101");
  EXPECT_EQ(rows[0].at("wall_seconds"), 3.0);  // Slurm's EndTime - StartTime
  EXPECT_EQ(rows[1].at("status"), "error");
  EXPECT_EQ(rows[1].at("job_id"), "101");
  EXPECT_EQ(rows[1].at("message"),
            "slurm task 101_2: FAILED (exit code 1:0) on node fake: 002.json was written by slurm "
            "job 7 task 2, not this array's task (removed)");
  EXPECT_FALSE(fs::exists(out() / "trials" / "002.json"));
}

// A re-run (after a task failed: the folder is not finished) with a smaller grid and an added
// scheduler option keeps the results measured (the options and the grid do not change a trial's
// measurement), submits the trial without one, and removes the trials left out.
TEST_F(SweepSlurmRerun, ARerunKeepsWhatMeasuresTheSameAndRemovesTrialsNoLongerInTheGrid) {
  ::setenv("FAKE_FAIL", "2", 1);
  ASSERT_EQ(sweep("[4, 8, 16]"), training::kExitTrialsFailed);
  ASSERT_TRUE(fs::exists(out() / "trials" / "003.json"));
  ::unsetenv("FAKE_FAIL");
  EXPECT_EQ(sweep("[4, 8]", {"sweep.slurm.options=[--time=10]"}), training::kExitOk);
  for (const char* ext : {".yaml", ".json", ".log"}) {
    EXPECT_FALSE(fs::exists(out() / "trials" / (std::string("003") + ext))) << ext;
  }
  const auto rows = trials();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("job_id"), "101");  // kept, not submitted again
  EXPECT_EQ(rows[1].at("job_id"), "102");
  EXPECT_EQ(rows[1].at("status"), "ok");
  EXPECT_FALSE(fs::exists(dir_ / "state" / "job-103"));
}

// A kept result edited by hand to values the trial never writes is refused, naming the file.
TEST_F(SweepSlurmRerun, AKeptResultHoldingValuesNoTrialWritesIsRefused) {
  ::setenv("FAKE_FAIL", "2", 1);
  ASSERT_EQ(sweep("[4, 8]"), training::kExitTrialsFailed);
  auto result = nlohmann::json::parse(std::ifstream(out() / "trials" / "001.json"));
  result["steps"] = 0;
  std::ofstream(out() / "trials" / "001.json") << result.dump();
  try {
    sweep("[4, 8]");
    ADD_FAILURE() << "accepted";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              (out() / "trials" / "001.json").string() +
                  ": steps: 0 is not at least 1 (train sweep-trial never writes it: edited or "
                  "damaged; remove the file to measure the trial again)");
  }
}

// A stop that comes once every task has ended loses nothing: the sweep is complete.
TEST_F(SweepSlurmRerun, AStopAfterEveryTaskEndedLeavesACompleteSweep) {
  ::setenv("FAKE_STOP", "1", 1);
  EXPECT_EQ(sweep("[4, 8]"), training::kExitStopped);
  const auto json = nlohmann::json::parse(std::ifstream(out() / "sweep.json"));
  EXPECT_TRUE(json.at("complete").get<bool>());
  for (const auto& row : json.at("trials")) EXPECT_EQ(row.at("status"), "ok");
}

// With --card, a stop once every task has ended is taken before the card's recordings of the
// trials' steps (seconds each), where it waited for all of them and then wrote a complete sweep:
// the rows (their results kept) say they were not predicted, and the sweep is not complete.
TEST_F(SweepSlurmRerun, AStopBeforeTheCardsRecordingsLeavesTheTrialsUnpredicted) {
  ::setenv("FAKE_STOP", "1", 1);
  EXPECT_EQ(sweep("[4, 8]", {}, "T4"), training::kExitStopped);
  const auto json = nlohmann::json::parse(std::ifstream(out() / "sweep.json"));
  EXPECT_FALSE(json.at("complete").get<bool>());
  ASSERT_EQ(json.at("trials").size(), 2u);
  for (const auto& row : json.at("trials")) {
    EXPECT_EQ(row.at("status"), "ok");
    EXPECT_FALSE(row.contains("fits_on_card")) << row.dump();
    EXPECT_EQ(row.value("card_prediction_error", "").rfind("not predicted: stopped by a signal", 0),
              0u)
        << row.dump();
  }
  EXPECT_NE(test_support::read_text(out() / "sweep.md").find("stopped by a signal during the card"),
            std::string::npos);
}

// A second stop (SIGTERM twice, 10 ms apart) ended `train sweep` at once and left the job array
// running. The exit at once runs scancel on the array first. Here the two stops arrive while the
// sweep asks Slurm for the array's state, before its own stop handling could cancel it.
TEST_F(SweepSlurmRerun, ASecondStopCancelsTheArrayBeforeItExits) {
  write_tool("scontrol",
             "[ \"$*\" = 'show config' ] && { echo 'MaxArraySize            = 1001'; exit 0; }\n"
             "kill -TERM $PPID; sleep 0.2; kill -TERM $PPID; sleep 5\n");
  write_tool("scancel", "echo \"$@\" >> \"$FAKE_SLURM/cancelled\"\n");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(sweep("[4]") == training::kExitStopped ? 3 : 4);  // not at once
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == training::kExitStopped) << status;
  EXPECT_EQ(test_support::read_text(dir_ / "state" / "cancelled"), "101\n");
}

}  // namespace
