#include "training/platform/memory_snapshot.h"

#include <spdlog/spdlog.h>

#include "training/platform/atomic_file.h"
#include "training/platform/device.h"

namespace training {

StepMemorySnapshot::StepMemorySnapshot(int64_t first_step, int64_t last_step, int64_t max_entries,
                                       std::filesystem::path file, torch::Device device)
    : first_step_(first_step),
      last_step_(last_step),
      max_entries_(max_entries),
      file_(std::move(file)),
      device_(device) {
  check_memory_history_supported(device_);
}

void StepMemorySnapshot::before_step(int64_t step) {
  if (active_ || done_ || step != first_step_) return;
  synchronize(device_);
  start_memory_history(device_, max_entries_);
  active_ = true;
}

void StepMemorySnapshot::after_step(int64_t step) {
  if (active_ && step >= last_step_) stop(step);
}

void StepMemorySnapshot::finish_early(int64_t last_step) {
  if (active_) stop(last_step);
}

void StepMemorySnapshot::stop(int64_t last_step) {
  synchronize(device_);
  const std::string pickle = memory_snapshot_pickle(device_);
  stop_memory_history(device_);
  active_ = false;
  done_ = true;
  write_file_atomically(file_, pickle);
  spdlog::info(
      "memory snapshot: steps {}..{} of the caching allocator's history in {} ({} bytes); "
      "open it at https://pytorch.org/memory_viz",
      first_step_, last_step, file_.string(), pickle.size());
}

}  // namespace training
