#include "training/studies/memory_breakdown.h"

#include <torch/torch.h>

#include <algorithm>
#include <sstream>

#include "training/out_of_memory.h"
#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/parts/setup.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"
#include "training/step/recompute.h"
#include "training/step/step.h"

namespace training {

const char* group_name(RowGroup group) {
  static const char* const names[] = {"static", "gradients", "activations", "transient"};
  return names[static_cast<int>(group)];
}

const char* phase_name(StepPhase phase) {
  return phase == StepPhase::Forward    ? "forward"
         : phase == StepPhase::Backward ? "backward"
                                        : "optimizer";
}

int64_t StepBreakdown::sum(RowGroup group, const std::string& stage) const {
  int64_t total = 0;
  for (const auto& row : rows) {
    if (row.group == group && (stage.empty() || row.stage == stage)) total += row.bytes;
  }
  return total;
}

namespace {

int64_t bytes_of(const torch::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.nbytes()) : 0;
}

// The low-precision copies of the convolution and linear weights (and biases) in `modules` that
// autocast makes and caches for the forward (none in fp32).
int64_t autocast_copy_bytes(const std::vector<std::shared_ptr<torch::nn::Module>>& modules,
                            Precision precision) {
  if (precision == Precision::FP32) return 0;
  int64_t elements = 0;
  for (const auto& root : modules) {
    for (const auto& module : root->modules(/*include_self=*/true)) {
      if (!module->as<torch::nn::Conv2d>() && !module->as<torch::nn::Linear>()) continue;
      for (const auto& parameter : module->parameters(/*recurse=*/false)) {
        elements += parameter.numel();
      }
    }
  }
  return elements * 2;  // bf16 and fp16 both take two bytes
}

// One segment of the measured forward: which blocks it runs, and what it held.
struct SegmentRecord {
  std::string name;   // "layer1.0", or "layer1.0-layer1.2" for several blocks
  std::string stage;  // the stage of its first block
  bool starts_stage = false;
  int64_t before = 0, after = 0;  // allocated bytes around its forward
  std::vector<int64_t> shape;     // of its output
};

// The segments for blocks grouped by `sizes`, named after torchvision's modules.
std::vector<SegmentRecord> segment_layout(const std::vector<int64_t>& sizes,
                                          const std::vector<int64_t>& stage_sizes) {
  std::vector<std::string> names, stages;
  std::vector<bool> firsts;
  for (size_t stage = 0; stage < stage_sizes.size(); ++stage) {
    for (int64_t block = 0; block < stage_sizes[stage]; ++block) {
      stages.push_back("layer" + std::to_string(stage + 1));
      names.push_back(stages.back() + "." + std::to_string(block));
      firsts.push_back(block == 0);
    }
  }
  std::vector<SegmentRecord> segments;
  size_t begin = 0;
  for (int64_t size : sizes) {
    const size_t last = begin + static_cast<size_t>(size) - 1;
    SegmentRecord segment;
    segment.name = size == 1 ? names[begin] : names[begin] + "-" + names[last];
    segment.stage = stages[begin];
    segment.starts_stage = firsts[begin];
    segments.push_back(segment);
    begin = last + 1;
  }
  return segments;
}

// Watches the measured step: the allocated bytes at each phase boundary, each phase's peak, each
// segment's delta, and the phase marks on the timeline. Inactive (a plain runner) until started.
class BreakdownProbe final : public StepObserver {
 public:
  BreakdownProbe(torch::Device device, models::SegmentRunner inner,
                 std::vector<SegmentRecord> segments)
      : device_(device), inner_(std::move(inner)), segments_(std::move(segments)) {}

  void start(MemoryTimeline* timeline) { timeline_ = timeline; }

  torch::Tensor run(const models::Segment& segment, const torch::Tensor& x) {
    if (!timeline_) return inner_(segment, x);
    auto& record = segments_.at(next_++);
    if (record.starts_stage) timeline_->mark(record.stage);
    record.before = allocated();
    torch::Tensor y = inner_(segment, x);
    record.after = allocated();
    record.shape = y.sizes().vec();
    if (next_ == segments_.size()) timeline_->mark("head");
    return y;
  }

  void forward_begins() override {
    if (!timeline_) return;
    next_ = 0;
    timeline_->mark("forward");
    forward_start = allocated();
    reset_peak_memory(device_);
  }
  void forward_ends() override {
    if (!timeline_) return;
    forward_end = allocated();
    forward_peak = peak();
    reset_peak_memory(device_);  // backward's window starts here, before autocast's cache goes
  }
  void backward_begins() override {
    if (timeline_) timeline_->mark("backward");
  }
  void optimizer_begins() override {
    if (!timeline_) return;
    backward_end = allocated();
    backward_peak = peak();
    timeline_->mark("optimizer");
    reset_peak_memory(device_);
  }
  void step_ends() override {
    if (!timeline_) return;
    optimizer_peak = peak();
    timeline_->mark("end");
  }

  const std::vector<SegmentRecord>& segments() const { return segments_; }

  int64_t forward_start = 0, forward_end = 0, forward_peak = 0;
  int64_t backward_end = 0, backward_peak = 0, optimizer_peak = 0;

 private:
  int64_t allocated() const { return memory_stats(device_).allocated; }
  int64_t peak() const { return memory_stats(device_).peak_allocated; }

  torch::Device device_;
  models::SegmentRunner inner_;
  std::vector<SegmentRecord> segments_;
  MemoryTimeline* timeline_ = nullptr;
  size_t next_ = 0;
};

// Stops feeding the timeline however the measured step ends.
struct TracingScope {
  TracingScope(const torch::Device& device, MemoryTimeline* timeline) : device(device) {
    trace_allocations(device, timeline);
  }
  ~TracingScope() { trace_allocations(device, nullptr); }
  TracingScope(const TracingScope&) = delete;
  TracingScope& operator=(const TracingScope&) = delete;
  torch::Device device;
};

std::shared_ptr<torch::nn::Module> child(models::ResNet& model, const std::string& name) {
  return *model->named_children().find(name);
}

struct StaticBytes {
  int64_t weights = 0, gradients = 0, optimizer_state = 0, average = 0;
};

StaticBytes static_bytes(models::ResNet& model, torch::optim::SGD& optimizer, WeightAverage* ema) {
  StaticBytes bytes;
  if (ema) {
    for (const auto& parameter : ema->average()->parameters()) bytes.average += bytes_of(parameter);
    for (const auto& buffer : ema->average()->buffers()) bytes.average += bytes_of(buffer);
  }
  for (const auto& parameter : model->parameters()) {
    bytes.weights += bytes_of(parameter);
    bytes.gradients += bytes_of(parameter.grad());
  }
  for (const auto& buffer : model->buffers()) bytes.weights += bytes_of(buffer);
  for (const auto& [key, state] : optimizer.state()) {
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state.get())) {
      bytes.optimizer_state += bytes_of(sgd->momentum_buffer());
    }
  }
  return bytes;
}

// The rows, the peak's phase and its itemized value, from what the probe saw.
void fill_rows(StepBreakdown& b, const BreakdownProbe& probe, const StaticBytes& fixed,
               int64_t scaler_bytes, int64_t batch_bytes, int64_t stem_copies, int64_t head_copies,
               const std::vector<int64_t>& segment_copies, bool accumulating) {
  const auto& segments = probe.segments();
  const std::vector<std::pair<StepPhase, int64_t>> phase_peaks = {
      {StepPhase::Forward, probe.forward_peak},
      {StepPhase::Backward, probe.backward_peak},
      {StepPhase::Optimizer, probe.optimizer_peak}};
  const auto top =
      std::max_element(phase_peaks.begin(), phase_peaks.end(),
                       [](const auto& a, const auto& c) { return a.second < c.second; });
  b.peak_phase = top->first;
  b.measured_peak_bytes = top->second;
  const bool optimizer_peak = b.peak_phase == StepPhase::Optimizer;

  auto add = [&](std::string name, RowGroup group, std::string stage, int64_t bytes, bool at_peak,
                 std::vector<int64_t> shape = {}) {
    b.rows.push_back({std::move(name), group, std::move(stage), std::move(shape), bytes, at_peak});
  };
  add("weights and buffers", RowGroup::Static, "", fixed.weights, true);
  add("optimizer state (momentum)", RowGroup::Static, "", fixed.optimizer_state, true);
  if (fixed.average > 0) add("weight average (EMA)", RowGroup::Static, "", fixed.average, true);
  add("GradScaler state", RowGroup::Static, "", scaler_bytes, true);
  add("batch (images, labels)", RowGroup::Static, "", batch_bytes, true);
  // The libraries' workspaces the allocator keeps between steps (cuBLAS's: about 65 MiB on an
  // H200; 0 on the CPU), measured where the probed step's forward pass starts.
  add("library workspaces", RowGroup::Static, "",
      probe.forward_start - fixed.weights - fixed.optimizer_state - fixed.average - scaler_bytes -
          batch_bytes - (accumulating ? fixed.gradients : 0),
      true);
  // Accumulating, the gradients of the micro-batches before are held through the whole step.
  add(accumulating ? "gradients (accumulated)" : "gradients", RowGroup::Gradients, "",
      fixed.gradients, optimizer_peak || accumulating);
  const int64_t first_before = segments.front().before, last_after = segments.back().after;
  add("stem", RowGroup::Activations, "stem", first_before - probe.forward_start - stem_copies,
      !optimizer_peak);
  int64_t copies = stem_copies + head_copies;
  for (size_t i = 0; i < segments.size(); ++i) {
    const auto& s = segments[i];
    add(s.name, RowGroup::Activations, s.stage, s.after - s.before - segment_copies[i],
        !optimizer_peak, s.shape);
    copies += segment_copies[i];
  }
  add("head (pool, fc, loss)", RowGroup::Activations, "head",
      probe.forward_end - last_after - head_copies, !optimizer_peak);
  add("autocast weight copies", RowGroup::Activations, "autocast", copies, !optimizer_peak);
  add("transient: forward", RowGroup::Transient, "", probe.forward_peak - probe.forward_end,
      b.peak_phase == StepPhase::Forward);
  add("transient: backward", RowGroup::Transient, "", probe.backward_peak - probe.forward_end,
      b.peak_phase == StepPhase::Backward);
  add("transient: optimizer step", RowGroup::Transient, "",
      probe.optimizer_peak - probe.backward_end, optimizer_peak);
  for (const auto& row : b.rows) b.itemized_peak_bytes += row.at_peak ? row.bytes : 0;
}

// What the probe runs each segment with. On: every segment recomputed; auto: the chosen blocks,
// each alone; off: every block plain.
models::SegmentRunner probed_runner(const models::ResNetImpl& model,
                                    const CheckpointingOptions& options, CheckpointMode mode) {
  if (mode == CheckpointMode::On) return &checkpoint;
  if (mode == CheckpointMode::Auto) return chosen_blocks_runner(model, options);
  return [](const models::Segment& segment, const torch::Tensor& x) { return segment.forward(x); };
}

}  // namespace

StepBreakdown measure_breakdown(const Config& base, const Setting& setting,
                                int64_t timeline_points) {
  Config config = base;
  setting.apply_to(config);
  const torch::Device device = set_up_device(config);
  StepBreakdown b;
  b.setting = setting;
  b.batch_size = config.training.batch_size;
  try {
    Decisions decisions;
    resolve_checkpointing(config, decisions, device, /*data_parallel=*/false);
    if (auto chosen = auto_blocks(config, decisions)) {
      std::tie(b.recomputed_blocks, b.predicted_peak_bytes) = *std::move(chosen);
    }
    config = decided(config, decisions);
    StepParts parts = build_measured_step_parts(config, device);
    auto& [model, optimizer, scaler, ema] = parts;
    const auto [images, labels] = synthetic_batch(config, device);
    model->train();
    const auto stages = model->stage_sizes();
    const std::vector<int64_t> sizes = setting.checkpointing == CheckpointMode::On
                                           ? checkpoint_segment_sizes(config.checkpointing, stages)
                                           : std::vector<int64_t>(model->blocks().size(), 1);
    BreakdownProbe probe(device, probed_runner(*model, config.checkpointing, setting.checkpointing),
                         segment_layout(sizes, stages));
    model->set_segments(sizes, [&probe](const models::Segment& segment, const torch::Tensor& x) {
      return probe.run(segment, x);
    });
    const auto precision = config.training.precision;
    // With training.accumulate_steps N the probed step is a group's last micro-batch: the N - 1
    // before it leave their gradients held (run unprobed, on the same batch).
    const int64_t micro_batches = config.training.accumulate_steps;
    const auto options = step_options(config).accumulate_steps(micro_batches);
    warm_up(parts, options, images, labels, device);
    for (int64_t micro = 0; micro + 1 < micro_batches; ++micro) {
      train_step(parts, images, labels, options, micro);
    }
    synchronize(device);

    MemoryTimeline timeline(memory_stats(device).allocated, timeline_points);
    if (config.memory.snapshot) start_memory_history(device, config.memory.snapshot_max_entries);
    {
      const TracingScope tracing(device, &timeline);
      probe.start(&timeline);
      train_step(parts, images, labels, StepOptions(options).observer(&probe), micro_batches - 1);
      synchronize(device);
    }
    if (config.memory.snapshot) {
      b.snapshot = memory_snapshot_pickle(device);
      stop_memory_history(device);
    }
    b.reserved_bytes = memory_stats(device).reserved;
    b.timeline = timeline.points();
    b.marks = timeline.marks();
    b.timeline_events = timeline.events();

    std::vector<int64_t> segment_copies;
    for (const auto& segment : model->segments()) {
      segment_copies.push_back(autocast_copy_bytes(segment.modules, precision));
    }
    fill_rows(b, probe, static_bytes(model, *optimizer, ema.get()), scaler.state_bytes(),
              bytes_of(images) + bytes_of(labels),
              autocast_copy_bytes({child(model, "conv1")}, precision),
              autocast_copy_bytes({child(model, "fc")}, precision), segment_copies,
              micro_batches > 1);
    b.status = TrialStatus::Ok;
  } catch (const std::exception& e) {
    b.status = is_out_of_memory(e) ? TrialStatus::OutOfMemory : TrialStatus::Error;
    b.message = measured_error_line(config, e);
    b.rows.clear();
    if (config.memory.snapshot) {
      try {
        stop_memory_history(device);
      } catch (const std::exception&) {
        // the failure above is the one to report
      }
    }
  }
  return b;
}

}  // namespace training
