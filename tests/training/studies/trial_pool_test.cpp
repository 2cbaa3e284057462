// One trial per GPU (sweep.devices), its assignment tested on the CPU: the jobs shared out among
// "GPUs" that are worker threads, each job recording which device ran it and when.
#include "training/studies/trial_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "test_support.h"
#include "training/platform/process.h"

namespace {

TEST(TrialPool, EachGpuRunsOneTrialAtATimeAndEveryGpuGetsTrials) {
  const std::vector<int64_t> gpus = {0, 1, 3};
  std::mutex mutex;
  std::map<int64_t, int> running, most, jobs_on;
  int all_running = 0, most_at_once = 0;
  std::vector<int> runs(12, 0);
  training::run_on_devices(gpus, runs.size(), [&](size_t job, int64_t gpu) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      most[gpu] = std::max(most[gpu], ++running[gpu]);
      most_at_once = std::max(most_at_once, ++all_running);
      ++jobs_on[gpu];
      ++runs[job];
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    const std::lock_guard<std::mutex> lock(mutex);
    --running[gpu];
    --all_running;
  });
  for (int count : runs) EXPECT_EQ(count, 1);  // every trial once
  for (int64_t gpu : gpus) {
    EXPECT_EQ(most[gpu], 1) << "GPU " << gpu << " ran two trials at once";
    EXPECT_GE(jobs_on[gpu], 1) << "GPU " << gpu << " got no trial";
  }
  EXPECT_EQ(jobs_on.size(), gpus.size());  // no GPU outside the list
  EXPECT_GE(most_at_once, 2);              // concurrent across GPUs
}

TEST(TrialPool, OneDeviceRunsTheTrialsInOrderInThisThread) {
  std::vector<size_t> order;
  const auto caller = std::this_thread::get_id();
  training::run_on_devices({-1}, 5, [&](size_t job, int64_t gpu) {
    EXPECT_EQ(gpu, -1);
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(job);
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

// A stop (or a spent budget) in one trial: no further trial starts, the running ones end, and the
// exception reaches the sweep.
TEST(TrialPool, AThrowingTrialStartsNoFurtherOneAndIsRethrown) {
  std::atomic<int> started{0};
  EXPECT_THROW(
      training::run_on_devices({0, 1}, 50,
                               [&](size_t job, int64_t) {
                                 ++started;
                                 if (job == 2) throw std::runtime_error("stop");
                                 std::this_thread::sleep_for(std::chrono::milliseconds(20));
                               }),
      std::runtime_error);
  EXPECT_LT(started.load(), 10);
}

// The trial's child process sees its GPU alone.
TEST(TrialPool, ATrialsChildSeesItsGpuAlone) {
  test_support::TempDir dir;
  const auto log = dir / "child.log";
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3", 1);
  const auto outcome = training::run_process({"/bin/sh", "-c", "echo \"[$CUDA_VISIBLE_DEVICES]\""},
                                             log, 60, training::one_gpu_environment(2));
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_EQ(training::last_line(log), "[2]");
}

}  // namespace
