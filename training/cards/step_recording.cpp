#include "training/cards/step_recording.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "training/parts/components.h"
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
  for (const auto& bucket : gradient_buckets(params, config.distributed.bucket_mb * kMiB)) {
    int64_t numel = 0;
    for (const size_t i : bucket) numel += params[i].numel();
    buckets.push_back(torch::empty({numel}, params[bucket.front()].options()));
  }
  return buckets;
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

int64_t reducer_bucket_bytes(const Config& config) {
  if (!config.sweep.data_parallel) return 0;
  auto model = build_model(config, torch::kCPU);
  int64_t bytes = 0;
  for (const auto& bucket : reducer_buckets(*model, config)) {
    bytes += bucket.numel() * static_cast<int64_t>(bucket.element_size());
  }
  return bytes;
}

}  // namespace training
