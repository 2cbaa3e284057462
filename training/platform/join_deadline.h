// The deadline of a data-parallel rank's join (distributed.cpp): a library call that outlives its
// own timeout (a connect to a peer behind a dead link) cannot keep a rank waiting.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace training {

// Seconds past distributed.timeout_seconds after which a rank still joining its group ends itself.
inline constexpr auto kJoinGrace = std::chrono::seconds(5);

// Exits 4 with its current stage's message when the join has not finished by its deadline.
class JoinDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  JoinDeadline(Clock::time_point at, std::string stage);
  ~JoinDeadline();
  JoinDeadline(const JoinDeadline&) = delete;
  JoinDeadline& operator=(const JoinDeadline&) = delete;
  // What the rank is waiting for, said if the deadline passes.
  void stage(std::string message) {
    std::lock_guard<std::mutex> lock(mutex_);
    stage_ = std::move(message);
  }
  // The time left before the grace period, at least a second: what a library call may take.
  std::chrono::milliseconds remaining() const;

 private:
  Clock::time_point at_;
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  std::string stage_;
  std::thread thread_;
};

}  // namespace training
