#include "training/platform/heartbeat.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "training/platform/duration.h"
#include "training/platform/statistics.h"

namespace training {

namespace {

std::atomic<double> first_seconds{Heartbeat::kFirstLineSeconds};
std::atomic<double> every_seconds{Heartbeat::kEverySeconds};

}  // namespace

void Heartbeat::set_intervals(double first, double every) {
  first_seconds = first > 0 ? first : kFirstLineSeconds;
  every_seconds = every > 0 ? every : kEverySeconds;
}

std::string Heartbeat::line(const std::string& what, int64_t done, int64_t total,
                            const std::string& unit, int64_t images, double seconds) {
  std::string text = what;
  if (total > 0) text += fmt::format(": {}/{} {}", done, total, unit);
  if (images > 0) text += ", " + rate_text(images / std::max(seconds, 1e-9)) + " img/s";
  text += fmt::format(" ({:.1f} s so far", seconds);
  if (total > 0 && done > 0 && done < total) {
    text += ", about " + format_duration(seconds / static_cast<double>(done) * (total - done)) +
            " left";
  }
  return text + ")";
}

Heartbeat::Heartbeat(std::string what, int64_t total, std::string unit)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total) {
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Heartbeat::advance(int64_t done, int64_t images) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = done;
  images_ = images;
}

void Heartbeat::loop() {
  const auto start = std::chrono::steady_clock::now();
  auto next = start + std::chrono::duration<double>(first_seconds.load());
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (wake_.wait_until(lock, next, [this] { return stopping_; })) return;
    const double seconds = seconds_since(start);
    spdlog::info("{}", line(what_, done_, total_, unit_, images_, seconds));
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(every_seconds.load()));
  }
}

}  // namespace training
