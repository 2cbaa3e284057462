#include "training/studies/card_prediction.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "training/parts/components.h"
#include "training/platform/device.h"
#include "training/platform/distributed.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/step/step.h"

namespace training {

namespace {

// Marks the phases of each step on the trace.
class PhaseMarks final : public StepObserver {
 public:
  explicit PhaseMarks(AllocationTrace& trace) : trace_(trace) {}
  int step = 0;
  int micro = 0;  // with accumulation, the micro-batch (from 1); 0: one micro-batch per step
  void forward_begins() override { mark("forward"); }
  void backward_begins() override { mark("backward"); }
  void optimizer_begins() override { mark("optimizer"); }
  void step_ends() override { mark("end"); }

 private:
  void mark(const std::string& phase) {
    trace_.mark(micro > 0 ? fmt::format("step{} micro{} {}", step, micro, phase)
                          : fmt::format("step{} {}", step, phase));
  }
  AllocationTrace& trace_;
};

// The CPU allocator's trace, limit and thread count for the recording, restored however it ends.
class RecordingScope {
 public:
  explicit RecordingScope(AllocationTrace* trace)
      : limit_(TrackingCpuAllocator::instance().limit()), threads_(torch::get_num_threads()) {
    TrackingCpuAllocator::instance().set_limit(0);
    torch::set_num_threads(1);
    trace_ = trace;
  }
  void start() { TrackingCpuAllocator::instance().set_trace(trace_); }
  ~RecordingScope() {
    TrackingCpuAllocator::instance().set_trace(nullptr);
    TrackingCpuAllocator::instance().set_limit(limit_);
    torch::set_num_threads(threads_);
  }
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  int64_t limit_;
  int threads_;
  AllocationTrace* trace_ = nullptr;
};

// A data-parallel sweep's trial (sweep.data_parallel): c10d's Reducer makes one flat buffer a
// gradient bucket (Reducer::initialize_buckets, the parameters' dtype) and holds them for the run.
std::vector<torch::Tensor> reducer_buckets(torch::nn::Module& model, const Config& config) {
  if (!config.sweep.data_parallel) return {};
  std::vector<torch::Tensor> params;
  for (auto& p : model.parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  std::vector<torch::Tensor> buckets;
  for (const auto& bucket : gradient_buckets(params, config.distributed.bucket_mb << 20)) {
    int64_t numel = 0;
    for (const size_t i : bucket) numel += params[i].numel();
    buckets.push_back(torch::empty({numel}, params[bucket.front()].options()));
  }
  return buckets;
}

int64_t ceil_div(int64_t numerator, int64_t denominator) {
  const int64_t q = numerator / denominator;
  return q + ((numerator % denominator != 0) && ((numerator > 0) == (denominator > 0)) ? 1 : 0);
}

}  // namespace

AllocationStream record_step_stream(const Config& base, const Setting& setting, int64_t batch,
                                    int steps, bool fp16_through_bf16) {
  if (const std::string why = setting.unpredictable(); !why.empty()) {
    throw UserError("--card: " + setting.label() + ": " + why);
  }
  Config config = base;
  setting.apply_to(config);
  config.training.device = "cpu";
  config.training.batch_size = batch;
  config.memory.limit = 0;
  const torch::Device device(torch::kCPU);
  AllocationTrace trace;
  RecordingScope scope(&trace);
  StepParts parts = build_measured_step_parts(config, device);
  const auto [images, labels] = synthetic_batch(config, device);
  const std::vector<torch::Tensor> buckets = reducer_buckets(*parts.model, config);
  parts.model->train();
  PhaseMarks marks(trace);
  const OperationWatch operations(trace);  // a CPU kernel's scratch is not the card's
  scope.start();
  const int64_t micro_batches = setting.accumulate_steps;
  StepOptions options = step_options(config).accumulate_steps(micro_batches).observer(&marks);
  if (setting.precision == Precision::FP16 && fp16_through_bf16) options.precision(Precision::BF16);
  for (int step = 1; step <= steps; ++step) {
    marks.step = step;
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      marks.micro = micro_batches > 1 ? static_cast<int>(micro) + 1 : 0;
      train_step(parts, images, labels, options, micro);
    }
  }
  return trace.stream();
}

AllocationStream LinearStream::at(int64_t batch) const {
  AllocationStream stream = at_a;
  for (size_t i = 0; i < stream.events.size(); ++i) {
    auto& event = stream.events[i];
    if (event.is_free()) continue;
    event.bytes =
        std::max<int64_t>(1, event.bytes + ceil_div(slope_numerator[i] * (batch - a), b - a));
  }
  return stream;
}

std::optional<int64_t> LinearStream::first_batch_over(int64_t bytes) const {
  std::optional<int64_t> first;
  for (size_t i = 0; i < at_a.events.size(); ++i) {
    const int64_t size = at_a.events[i].bytes;
    if (at_a.events[i].is_free() || slope_numerator[i] <= 0) continue;
    // size + ceil(slope x (batch - a) / (b - a)) > bytes exactly when batch - a > (bytes - size)
    // x (b - a) / slope: from a + floor of that + 1 on (128 bits: no overflow).
    const __int128 room = static_cast<__int128>(bytes - size) * (b - a);
    __int128 whole = room / slope_numerator[i];
    if (room % slope_numerator[i] != 0 && room < 0) --whole;
    const int64_t batch = static_cast<int64_t>(
        std::clamp<__int128>(a + whole + 1, 1, std::numeric_limits<int64_t>::max() / 2));
    first = std::min(first.value_or(batch), batch);
  }
  return first;
}

LinearStream linear_stream(const AllocationStream& at_a, int64_t a, const AllocationStream& at_b,
                           int64_t b) {
  const auto& x = at_a.events;
  const auto& y = at_b.events;
  const size_t common = std::min(x.size(), y.size());
  for (size_t i = 0; i < common; ++i) {
    if (x[i].id != y[i].id || x[i].is_free() != y[i].is_free()) {
      throw std::runtime_error(fmt::format(
          "the allocation streams at batch {} and {} differ at event {} of {}: the step does not "
          "allocate the same tensors at every batch, so it cannot be scaled",
          a, b, i, x.size()));
    }
  }
  if (x.size() != y.size()) {
    throw std::runtime_error(
        fmt::format("the allocation streams at batch {} and {} have {} and {} events", a, b,
                    x.size(), y.size()));
  }
  LinearStream linear{at_a, {}, a, b};
  linear.slope_numerator.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) linear.slope_numerator[i] = y[i].bytes - x[i].bytes;
  return linear;
}

int64_t mismatched_allocations(const LinearStream& stream, const AllocationStream& recorded,
                               int64_t batch) {
  const AllocationStream predicted = stream.at(batch);
  if (predicted.events.size() != recorded.events.size()) return -1;
  int64_t mismatched = 0;
  for (size_t i = 0; i < predicted.events.size(); ++i) {
    const auto& p = predicted.events[i];
    const auto& r = recorded.events[i];
    if (p.id != r.id || p.is_free() != r.is_free()) return -1;
    if (p.bytes != r.bytes) ++mismatched;
  }
  return mismatched;
}

Replay replay_stream(const AllocationStream& stream, const AllocatorOptions& options,
                     const BesideTensors& beside) {
  CachingAllocatorModel allocator(options);
  Replay replay;
  std::string phase = "start";
  size_t next_mark = 0;
  PhasePeak current{phase, 0, 0};
  auto close_phase = [&] {
    if (current.phase != "held" && current.phase != "start") replay.phases.push_back(current);
  };
  bool workspaces_placed = false;
  auto open_phase = [&](const std::string& label) {
    close_phase();
    phase = label;
    current = {label, allocator.stats().allocated, allocator.stats().reserved};
    const std::string backward = " backward";
    if (!workspaces_placed && label.size() > backward.size() &&
        label.compare(label.size() - backward.size(), backward.size(), backward) == 0) {
      workspaces_placed = true;
      for (int64_t w = 0; w < beside.workspaces; ++w) {
        if (!allocator.allocate(-1 - w, beside.cublas_workspace)) {
          replay.fits = false;
          replay.failed_at = label;
        }
      }
    }
  };
  for (size_t i = 0; i <= stream.events.size() && replay.fits; ++i) {
    while (next_mark < stream.marks.size() && stream.marks[next_mark].event == i) {
      open_phase(stream.marks[next_mark++].label);
    }
    if (i == stream.events.size()) break;
    const auto& event = stream.events[i];
    if (event.is_free()) {
      allocator.free(event.id);
    } else if (!allocator.allocate(event.id, event.bytes)) {
      replay.fits = false;
      replay.failed_at = phase;
      break;
    }
    const auto& stats = allocator.stats();
    current.allocated = std::max(current.allocated, stats.allocated);
    current.reserved = std::max(current.reserved, stats.reserved);
    if (stats.allocated > replay.peak_allocated) {
      replay.peak_allocated = stats.allocated;
      replay.peak_phase = phase;
    }
  }
  close_phase();
  replay.peak_reserved = allocator.stats().peak_reserved;
  replay.retries = allocator.stats().retries;
  return replay;
}

AllocationStream with_prefetched_batches(AllocationStream stream, int64_t count, int64_t batch,
                                         int64_t image_size) {
  if (count <= 0) return stream;
  size_t at = 0;
  for (const auto& mark : stream.marks) {
    if (mark.label == "held") at = mark.event;
  }
  int64_t next_id = 0;
  for (const auto& event : stream.events) next_id = std::max(next_id, event.id + 1);
  const auto [images, labels] = batch_bytes(batch, image_size);
  std::vector<TraceEvent> added;
  for (int64_t i = 0; i < count; ++i) {
    added.push_back({next_id++, images});
    added.push_back({next_id++, labels});
  }
  stream.events.insert(stream.events.begin() + static_cast<std::ptrdiff_t>(at), added.begin(),
                       added.end());
  for (auto& mark : stream.marks) {
    if (mark.event >= at) mark.event += added.size();
  }
  return stream;
}

int64_t largest_fitting_batch(const LinearStream& stream, int64_t prefetched, int64_t image_size,
                              const AllocatorOptions& options, const BesideTensors& beside) {
  auto fits = [&](int64_t batch) {
    return replay_stream(with_prefetched_batches(stream.at(batch), prefetched, batch, image_size),
                         options, beside)
        .fits;
  };
  const auto beyond = stream.first_batch_over(options.limit);
  if (!beyond) throw std::runtime_error("no allocation of the step grows with the batch");
  // No larger than training.batch_size takes (a 1024TiB card reported 2,328,970,624).
  const int64_t ceiling = std::min(*beyond, kMaxBatchSize + 1);
  if (ceiling <= 1 || !fits(1)) return 0;
  int64_t good = 1, bad = std::min<int64_t>(2, ceiling);
  while (bad < ceiling && fits(bad)) good = bad, bad = std::min(bad * 2, ceiling);
  while (bad - good > 1) {
    const int64_t middle = good + (bad - good) / 2;
    (fits(middle) ? good : bad) = middle;
  }
  return good;
}

int64_t smallest_fitting_limit(const AllocationStream& stream, AllocatorOptions options,
                               const BesideTensors& beside, Replay* at_it) {
  auto replay_at = [&](int64_t mib) {
    options.limit = mib * kMiB;
    return replay_stream(stream, options, beside);
  };
  options.limit = 0;  // without a limit nothing cached is freed: a limit that surely fits
  int64_t good = std::max<int64_t>(
      1, (replay_stream(stream, options, beside).peak_reserved + kMiB - 1) / kMiB);
  Replay best = replay_at(good);
  while (!best.fits && good < (int64_t{1} << 30)) best = replay_at(good *= 2);  // to 1 PiB
  // Below the allocated peak nothing fits (reserved holds it): the search starts there.
  for (int64_t bad = std::min(good - 1, (best.peak_allocated + kMiB - 1) / kMiB - 1);
       good - bad > 1;) {
    const int64_t middle = bad + (good - bad) / 2;
    Replay r = replay_at(middle);
    if (r.fits) {
      good = middle;
      best = std::move(r);
    } else {
      bad = middle;
    }
  }
  if (at_it) *at_it = std::move(best);
  return good * kMiB;
}

CardPredictor::CardPredictor(Config config, Card card, AllocatorOptions options,
                             int64_t allocator_limit)
    : config_(std::move(config)),
      card_(std::move(card)),
      beside_(beside_tensors(card_)),
      allocator_(options) {
  allocator_.limit = std::max<int64_t>(1, card_.memory_bytes - beside_.outside_allocator);
  allocator_.device_memory = card_.memory_bytes;
  if (config_.sweep.data_parallel) {
    auto model = build_model(config_, torch::kCPU);
    for (const auto& bucket : reducer_buckets(*model, config_)) {
      reducer_bucket_bytes_ += bucket.numel() * static_cast<int64_t>(bucket.element_size());
    }
  }
  if (allocator_limit > 0) {
    allocator_.limit = allocator_limit;
  } else if (config_.memory.limit > 0 && config_.memory.limit < allocator_.limit) {
    allocator_.limit = config_.memory.limit;
    limited_by_memory_limit_ = true;
  }
}

const CardPredictor::Recorded& CardPredictor::recorded(const Setting& asked) {
  // Every micro-batch after the second holds what the second holds: 2 stand for any number.
  Setting setting = asked;
  setting.accumulate_steps = std::min<int64_t>(asked.accumulate_steps, 2);
  for (const auto& known : recorded_) {
    if (known.setting == setting) return known;
  }
  const int64_t a = kTraceBatches[0], b = kTraceBatches[1], c = kTraceBatches[2];
  spdlog::info("{}: recording the step's allocations at batches {}, {} and {} (CPU, 1 thread)",
               setting.name(), a, b, c);
  LinearStream stream = linear_stream(record_step_stream(config_, setting, a), a,
                                      record_step_stream(config_, setting, b), b);
  const int64_t mismatched =
      mismatched_allocations(stream, record_step_stream(config_, setting, c), c);
  recorded_.push_back({setting, std::move(stream), mismatched});
  return recorded_.back();
}

CardPrediction CardPredictor::predict(const Setting& setting, int64_t batch) {
  const Recorded& r = recorded(setting);
  CardPrediction p;
  p.card = card_;
  p.beside = beside_;
  p.allocator = allocator_;
  p.limited_by_memory_limit = limited_by_memory_limit_;
  p.prefetched_batches = prefetch_for(config_.data, /*cuda=*/true);
  p.batch_size = batch;
  const int64_t image_size = config_.data.image_size;
  p.checked_batch = kTraceBatches[2];
  p.mismatched = r.mismatched;
  p.reducer_bucket_bytes = reducer_bucket_bytes_;
  const AllocationStream stream =
      with_prefetched_batches(r.stream.at(batch), p.prefetched_batches, batch, image_size);
  p.replay = replay_stream(stream, p.allocator, p.beside);
  p.needed_limit = smallest_fitting_limit(stream, p.allocator, p.beside, &p.needed);
  p.largest_batch =
      largest_fitting_batch(r.stream, p.prefetched_batches, image_size, p.allocator, p.beside);
  return p;
}

CardPrediction predict_on_card(const Config& config, const Setting& setting, const Card& card,
                               const AllocatorOptions& allocator) {
  return CardPredictor(config, card, allocator).predict(setting, config.training.batch_size);
}

}  // namespace training
