#include "training/platform/heartbeat.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <thread>

namespace {

// The default logger writes into a string while a test runs.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
    sink->set_pattern("%v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() {
    spdlog::set_default_logger(previous_);
    training::Heartbeat::set_intervals(0, 0);
  }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST(Heartbeat, TheLineSaysHowFarTheRateAndTheTimeLeft) {
  EXPECT_EQ(training::Heartbeat::line("evaluation", 5, 20, "batches", 2500, 10.0),
            "evaluation: 5/20 batches, 250 img/s (10.0 s so far, about 0:30 left)");
  // Nothing done yet: no time left to say; a phase of one call: the time so far alone.
  EXPECT_EQ(training::Heartbeat::line("evaluation", 0, 20, "batches", 0, 12.0),
            "evaluation: 0/20 batches (12.0 s so far)");
  EXPECT_EQ(training::Heartbeat::line("plots: plot_run.py", 0, 0, "", 0, 41.25),
            "plots: plot_run.py (41.2 s so far)");
}

TEST(Heartbeat, APhasePastTheFirstIntervalSaysWhereItIsAndAShortOneSaysNothing) {
  CapturedLog log;
  {
    training::Heartbeat quick("quick phase", 4, "steps");  // the default 10 s are not reached
    quick.advance(4);
  }
  EXPECT_EQ(log.text(), "");
  training::Heartbeat::set_intervals(0.02, 0.02);
  {
    training::Heartbeat slow("slow phase", 4, "steps");
    slow.advance(1, 64);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  const auto text = log.text();
  EXPECT_NE(text.find("slow phase: 1/4 steps, "), std::string::npos) << text;
  EXPECT_NE(text.find(" left)"), std::string::npos) << text;
  EXPECT_EQ(text.find("quick phase"), std::string::npos) << text;
}

}  // namespace
