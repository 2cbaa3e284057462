#include "training/step/recompute.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "training/step/amp.h"

namespace training {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The RNG and autocast state at forward time, to be replayed by the recomputation.
struct ForwardState {
  torch::Tensor cpu_rng;
  torch::Tensor device_rng;  // undefined unless the input lives on an accelerator
  c10::Device device = torch::kCPU;
  bool autocast = false;
  c10::ScalarType autocast_dtype = c10::ScalarType::Undefined;
};

// Stored in the autograd context as IValues, so the context owns everything it needs.
void capture(AutogradContext* ctx, const torch::Tensor& x) {
  const auto type = x.device().type();
  ctx->saved_data["device"] = x.device();
  ctx->saved_data["cpu_rng"] = at::detail::getDefaultCPUGenerator().get_state();
  if (!x.is_cpu()) {
    ctx->saved_data["device_rng"] = at::globalContext().defaultGenerator(x.device()).get_state();
  }
  ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(type);
  ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(at::autocast::get_autocast_dtype(type));
}

ForwardState restore(AutogradContext* ctx) {
  ForwardState state;
  state.device = ctx->saved_data["device"].toDevice();
  state.cpu_rng = ctx->saved_data["cpu_rng"].toTensor();
  if (ctx->saved_data.count("device_rng"))
    state.device_rng = ctx->saved_data["device_rng"].toTensor();
  state.autocast = ctx->saved_data["autocast"].toBool();
  state.autocast_dtype = static_cast<c10::ScalarType>(ctx->saved_data["autocast_dtype"].toInt());
  return state;
}

// Sets the generators to `state` for its lifetime and puts the current ones back after.
class RngReplay {
 public:
  explicit RngReplay(const ForwardState& state) : state_(state) {
    cpu_ = at::detail::getDefaultCPUGenerator();
    saved_cpu_ = cpu_.get_state();
    cpu_.set_state(state.cpu_rng);
    if (state.device_rng.defined()) {
      device_ = at::globalContext().defaultGenerator(state.device);
      saved_device_ = device_.get_state();
      device_.set_state(state.device_rng);
    }
  }
  ~RngReplay() {
    cpu_.set_state(saved_cpu_);
    if (state_.device_rng.defined()) device_.set_state(saved_device_);
  }

 private:
  const ForwardState& state_;
  at::Generator cpu_, device_;
  torch::Tensor saved_cpu_, saved_device_;
};

Precision precision_of(const ForwardState& state) {
  if (!state.autocast) return Precision::FP32;
  return state.autocast_dtype == at::kBFloat16 ? Precision::BF16 : Precision::FP16;
}

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const models::Segment* segment,
                               const torch::Tensor& x) {
    // Autograd contexts hold IValues; the segment lives in the model, which outlives backward.
    ctx->saved_data["segment"] = reinterpret_cast<int64_t>(segment);
    capture(ctx, x);
    ctx->save_for_backward({x});
    torch::NoGradGuard no_grad;
    return segment->forward(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto* segment =
        reinterpret_cast<const models::Segment*>(ctx->saved_data["segment"].toInt());
    const ForwardState state = restore(ctx);
    auto input = ctx->get_saved_variables()[0].detach().requires_grad_(true);

    std::vector<std::pair<torch::Tensor, torch::Tensor>> buffers;  // (live, copy before)
    for (const auto& module : segment->modules) {
      for (auto& buffer : module->buffers()) buffers.emplace_back(buffer, buffer.clone());
    }
    torch::Tensor output;
    {
      RngReplay replay(state);
      torch::AutoGradMode grad_mode(true);
      // Backward may run on an autograd worker thread, where autocast is off: set it explicitly.
      AutocastGuard autocast(state.device.type(), precision_of(state));
      output = segment->forward(input);
    }
    // Re-entrant backward through the recomputed segment: parameter gradients accumulate into
    // .grad as usual; the input gradient is handed on to the rest of the graph.
    torch::autograd::backward({output}, {grad_outputs[0]});
    // Only now: BatchNorm's backward checks that the buffers it saved are unmodified.
    {
      torch::NoGradGuard no_grad;
      for (auto& [live, before] : buffers) live.copy_(before);
    }
    return {torch::Tensor(), input.grad()};
  }
};

}  // namespace

torch::Tensor checkpoint(const models::Segment& segment, const torch::Tensor& x) {
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) return segment.forward(x);
  return CheckpointFunction::apply(&segment, x);
}

std::vector<int64_t> checkpoint_segment_sizes(const CheckpointingOptions& options,
                                              const std::vector<int64_t>& stage_sizes) {
  const int64_t blocks = std::accumulate(stage_sizes.begin(), stage_sizes.end(), int64_t{0});
  switch (options.granularity()) {
    case CheckpointGranularity::Block:
      return std::vector<int64_t>(blocks, 1);
    case CheckpointGranularity::Stage:
      return stage_sizes;
    case CheckpointGranularity::Segments: {
      const int64_t count = std::clamp<int64_t>(options.segments(), 1, blocks);
      std::vector<int64_t> sizes;
      for (int64_t i = 0; i < count; ++i)
        sizes.push_back(blocks / count + (i < blocks % count ? 1 : 0));
      return sizes;
    }
  }
  return {};
}

void apply_checkpointing(models::ResNetImpl& model, const CheckpointingOptions& options) {
  switch (options.mode()) {
    case CheckpointMode::Off:
      model.set_segments({}, nullptr);
      return;
    case CheckpointMode::On:
      model.set_segments(checkpoint_segment_sizes(options, model.stage_sizes()), &checkpoint);
      return;
    case CheckpointMode::Auto:
      break;
  }
  model.set_segments(std::vector<int64_t>(model.blocks().size(), 1),
                     chosen_blocks_runner(model, options));
}

models::SegmentRunner chosen_blocks_runner(const models::ResNetImpl& model,
                                           const CheckpointingOptions& options) {
  TORCH_INTERNAL_ASSERT(options.blocks(), "checkpointing.enabled: auto with its blocks not chosen");
  const auto names = models::block_names(model.options().depth());
  std::vector<bool> recomputed(names.size(), false);
  for (const auto& name : *options.blocks()) {
    const auto found = std::find(names.begin(), names.end(), name);
    if (found == names.end()) {
      throw std::invalid_argument("checkpointing.blocks: the model has no block '" + name + "'");
    }
    recomputed[static_cast<size_t>(found - names.begin())] = true;
  }
  return [recomputed](const models::Segment& segment, const torch::Tensor& x) {
    return recomputed.at(static_cast<size_t>(segment.first_block)) ? checkpoint(segment, x)
                                                                   : segment.forward(x);
  };
}

}  // namespace training
