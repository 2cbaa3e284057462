#include "training/loop/progress.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

#include "training/platform/statistics.h"

namespace training {

std::string format_progress(const Interval& s) {
  char text[256];
  std::snprintf(text, sizeof text,
                "epoch %ld/%ld  step %ld/%ld  %s img/s  loss %.4f  acc %.2f%%  lr %.4g  ETA %s",
                static_cast<long>(s.epoch), static_cast<long>(s.epochs), static_cast<long>(s.batch),
                static_cast<long>(s.batches), rate_text(s.images_per_second).c_str(), s.loss,
                100.0 * s.accuracy, s.lr,
                s.eta_seconds ? format_duration(*s.eta_seconds).c_str() : "after warm-up");
  return text;
}

bool progress_due_by_time(bool shown_before, int64_t steps, double seconds, double since_last) {
  if (!shown_before) return steps >= kFirstLineSteps && seconds >= kFirstLineSeconds;
  return since_last >= kEverySeconds;
}

ProgressLine::ProgressLine() : live_(::isatty(STDERR_FILENO) == 1) {}

void ProgressLine::show(const Interval& interval) {
  const auto text = format_progress(interval);
  if (!live_) {
    spdlog::info("{}", text);
    return;
  }
  // The terminal gets one line rewritten in place; train.log still gets every line, at trace
  // level, which only the file sink lets through (see configure_console_logging).
  spdlog::trace("{}", text);
  std::fprintf(stderr, "\r\033[2K%s", text.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::clear() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[2K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace training
