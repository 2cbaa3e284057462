#include "training/platform/join_deadline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "training/platform/errors.h"

namespace training {

JoinDeadline::JoinDeadline(Clock::time_point at, std::string stage)
    : at_(at), stage_(std::move(stage)) {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_.wait_until(lock, at_, [this] { return finished_; })) return;
    spdlog::error("{}", stage_);
    spdlog::default_logger()->flush();
    std::_Exit(kExitDistributed);
  });
}

JoinDeadline::~JoinDeadline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  done_.notify_all();
  thread_.join();
}

std::chrono::milliseconds JoinDeadline::remaining() const {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(at_ - kJoinGrace - Clock::now());
  return std::max(left, std::chrono::milliseconds(1000));
}

}  // namespace training
