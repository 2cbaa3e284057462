// The profiler window over training steps: the trace, the operator table, the loader thread.
#include "training/platform/profiler.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "training/tiny_run.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using tiny_run::tiny;
using tiny_run::train;

TEST(Diagnostics, ProfilerTracesTheStepWindowAndLogsTheTopOperators) {
  test_support::TempDir dir;
  auto config = tiny("profiler: {enabled: true, steps: [2, 3], top: 5}\n");
  train(config, dir / "run");
  std::ifstream in(dir / "run/trace.json");
  const auto trace = nlohmann::json::parse(in);  // valid JSON, or this throws
  std::set<std::string> steps;
  int64_t ops = 0;
  for (const auto& event : trace.at("traceEvents")) {
    const auto name = event.value("name", std::string());
    if (name.rfind("ProfilerStep#", 0) == 0) steps.insert(name);
    if (name.rfind("aten::", 0) == 0) ++ops;
  }
  EXPECT_EQ(steps, (std::set<std::string>{"ProfilerStep#2", "ProfilerStep#3"}));
  EXPECT_GT(ops, 100);
  const auto log = test_support::read_text(dir / "run/train.log");
  EXPECT_NE(log.find("profiler: steps 2..3 traced to"), std::string::npos);
  EXPECT_NE(log.find("top 5 by self time:"), std::string::npos);
  EXPECT_NE(log.find("aten::convolution_backward"), std::string::npos);
}

// The loader's background thread gathers and augments batches: its ops belong in the trace.
TEST(Diagnostics, ProfilerTracesTheLoaderThreadToo) {
  test_support::TempDir dir;
  auto config = tiny("profiler: {enabled: true, steps: [2, 4], top: 5}\n");
  config.data.prefetch = 2;
  train(config, dir / "run");
  std::ifstream in(dir / "run/trace.json");
  const auto trace = nlohmann::json::parse(in);
  std::set<int64_t> gather_threads, model_threads;
  for (const auto& event : trace.at("traceEvents")) {
    const auto name = event.value("name", std::string());
    if (name == "aten::index_select") gather_threads.insert(event.value("tid", int64_t{-1}));
    if (name == "aten::convolution") model_threads.insert(event.value("tid", int64_t{-1}));
  }
  ASSERT_FALSE(gather_threads.empty()) << "no loader op in the trace";
  ASSERT_FALSE(model_threads.empty());
  // Gathered on a thread of its own, not the training thread.
  EXPECT_EQ(gather_threads.count(*model_threads.begin()), 0u);
}

TEST(Diagnostics, ProfilerWindowMustBeOrdered) {
  EXPECT_THROW(tiny("profiler: {steps: [5, 2]}\n"), training::ConfigError);
  EXPECT_THROW(tiny("profiler: {steps: [5]}\n"), training::ConfigError);
}

}  // namespace
