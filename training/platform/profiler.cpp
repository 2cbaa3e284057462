#include "training/platform/profiler.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "training/platform/atomic_file.h"
#include "training/platform/device.h"

namespace training {

namespace fs = std::filesystem;
namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

namespace {

std::set<ActivityType> activities_for(const torch::Device& device) {
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  return activities;
}

torch::profiler::impl::ProfilerConfig config_for(const ProfilerOptions& options) {
  return torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::KINETO,
                                               options.record_shapes());
}

struct OperatorStat {
  std::string name;
  int64_t calls = 0;
  double self_us = 0;   // time in the op itself, children excluded (CPU ops) / kernel time (GPU)
  double total_us = 0;  // time including children
  bool device = false;  // a GPU kernel or copy, not a CPU op
};

// Aggregates events by name; self time = duration minus the durations of directly nested events
// on the same thread. Sorted by self time, largest first.
std::vector<OperatorStat> operator_table(const std::vector<prof::KinetoEvent>& events) {
  // Per thread, events sorted by start; a stack of open events finds each one's parent.
  struct Span {
    uint64_t start, end;
    size_t index;
  };
  std::map<uint64_t, std::vector<Span>> threads;
  std::vector<double> child_ns(events.size(), 0.0);
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (e.deviceType() != c10::DeviceType::CPU) continue;
    threads[e.startThreadId()].push_back({e.startNs(), e.endNs(), i});
  }
  for (auto& [thread, spans] : threads) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<const Span*> open;
    for (const auto& span : spans) {
      while (!open.empty() && open.back()->end <= span.start) open.pop_back();
      if (!open.empty()) child_ns[open.back()->index] += static_cast<double>(span.end - span.start);
      open.push_back(&span);
    }
  }
  std::map<std::string, OperatorStat> by_name;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    const bool device = e.deviceType() != c10::DeviceType::CPU;
    auto& stat = by_name[(device ? "[gpu] " : "") + e.name()];
    stat.device = device;
    stat.calls += 1;
    const double duration = static_cast<double>(e.durationNs());
    stat.total_us += duration / 1000.0;
    stat.self_us += std::max(0.0, duration - child_ns[i]) / 1000.0;
  }
  std::vector<OperatorStat> stats;
  for (auto& [name, stat] : by_name) {
    stat.name = name;
    stats.push_back(stat);
  }
  std::sort(stats.begin(), stats.end(),
            [](const OperatorStat& a, const OperatorStat& b) { return a.self_us > b.self_us; });
  return stats;
}

// The table as text, like key_averages().table().
std::string format_operator_table(const std::vector<OperatorStat>& stats, int64_t top) {
  double self_total = 0;
  for (const auto& s : stats) {
    if (!s.device) self_total += s.self_us;
  }
  std::ostringstream out;
  out << fmt::format("{:<48} {:>8} {:>14} {:>8} {:>14}\n", "name", "calls", "self (us)", "self %",
                     "total (us)");
  int64_t shown = 0;
  for (const auto& s : stats) {
    if (shown++ >= top) break;
    const std::string name = s.name.size() > 48 ? s.name.substr(0, 45) + "..." : s.name;
    out << fmt::format("{:<48} {:>8} {:>14.1f} {:>7.1f}% {:>14.1f}\n", name, s.calls, s.self_us,
                       s.device || self_total == 0 ? 0.0 : 100.0 * s.self_us / self_total,
                       s.total_us);
  }
  return out.str();
}

}  // namespace

StepProfiler::StepProfiler(ProfilerOptions options, fs::path trace_file, torch::Device device)
    : options_(options), trace_file_(std::move(trace_file)), device_(device) {
  if (!options_.enabled()) return;
  // On a CPU run Kineto would log an error for failing to count GPUs; nothing is wrong then.
  if (device_.is_cpu()) setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  prof::prepareProfiler(config_for(options_), activities_for(device_));
}

StepProfiler::~StepProfiler() {
  if (active_) prof::disableProfiler();  // an interrupted window: discard quietly
}

void StepProfiler::before_step(int64_t step) {
  if (!options_.enabled() || active_ || done_ || step != options_.first_step()) return;
  synchronize(device_);  // earlier steps' GPU work stays out of the window
  prof::enableProfiler(config_for(options_), activities_for(device_));
  active_ = true;
}

void StepProfiler::after_step(int64_t step) {
  if (active_ && step >= options_.last_step()) stop(step);
}

void StepProfiler::finish_early(int64_t last_step) {
  if (!active_) return;
  spdlog::info(
      "profiler: the run ended at step {}, inside the window {}..{}; writing what was traced",
      last_step, options_.first_step(), options_.last_step());
  stop(last_step);
}

void StepProfiler::stop(int64_t last_step) {
  synchronize(device_);
  auto result = prof::disableProfiler();
  active_ = false;
  done_ = true;
  replace_file_atomically(trace_file_,
                          [&](const fs::path& temporary) { result->save(temporary.string()); });
  spdlog::info("profiler: steps {}..{} traced to {} ({} events); top {} by self time:\n{}",
               options_.first_step(), last_step, trace_file_.string(), result->events().size(),
               options_.top(),
               format_operator_table(operator_table(result->events()), options_.top()));
}

}  // namespace training
