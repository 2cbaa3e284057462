#include "training/studies/trial_pool.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace training {

void run_on_devices(const std::vector<int64_t>& devices, size_t jobs,
                    const std::function<void(size_t job, int64_t device)>& work) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::exception_ptr first;
  auto worker = [&](int64_t device) {
    while (!failed) {
      const size_t job = next++;
      if (job >= jobs) return;
      try {
        work(job, device);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
        failed = true;
      }
    }
  };
  if (devices.size() == 1) {  // in this thread: a serial sweep as it always ran
    for (size_t job = 0; job < jobs; ++job) work(job, devices[0]);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(devices.size());
  for (int64_t device : devices) threads.emplace_back(worker, device);
  for (auto& thread : threads) thread.join();
  if (first) std::rethrow_exception(first);
}

std::vector<std::string> one_gpu_environment(int64_t device) {
  return {"CUDA_VISIBLE_DEVICES=" + std::to_string(device)};
}

}  // namespace training
