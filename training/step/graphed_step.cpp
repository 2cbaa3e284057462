#include "training/step/graphed_step.h"

#include <spdlog/spdlog.h>

#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/step/optim.h"

namespace training {

GraphedStep::GraphedStep(StepParts& parts, StepOptions options, const torch::Device& device,
                         bool eager_if_capture_fails, MakeGraph make_graph)
    : parts_(parts),
      options_(options),
      device_(device),
      eager_if_capture_fails_(eager_if_capture_fails),
      make_graph_(make_graph ? std::move(make_graph) : MakeGraph([device] {
        try {
          return std::make_unique<DeviceGraph>(device);
        } catch (const UserError& e) {
          throw KeyError("training.cuda_graph",
                         std::string(e.what()) + " (set training.cuda_graph: off or auto)");
        }
      })),
      graph_(make_graph_()) {
  auto* fused = dynamic_cast<FusedSGD*>(parts_.optimizer.get());
  if (!fused) {
    throw KeyError("training.cuda_graph", "the captured step needs optimizer.fused: true");
  }
  fused->use_device_lr(device);
}

StepResult GraphedStep::run_eagerly(const torch::Tensor& images, const torch::Tensor& labels) {
  last_replayed_ = false;
  return train_step(parts_, images, labels, options_);
}

StepResult GraphedStep::run(const torch::Tensor& images, const torch::Tensor& labels) {
  if (eager_) return run_eagerly(images, labels);
  const bool same_shape = images_.defined() && images.sizes() == images_.sizes() &&
                          labels.sizes() == labels_.sizes() &&
                          images.is_contiguous(c10::MemoryFormat::ChannelsLast) ==
                              images_.is_contiguous(c10::MemoryFormat::ChannelsLast);
  if (!same_shape) {
    if (images_.defined()) graph_ = make_graph_();
    images_ = torch::empty_like(images, c10::MemoryFormat::Preserve);
    labels_ = torch::empty_like(labels);
    steps_ = 0;
  }
  {
    torch::NoGradGuard no_grad;
    images_.copy_(images);
    labels_.copy_(labels);
  }
  ++steps_;
  last_replayed_ = false;
  if (steps_ <= kWarmupSteps) {
    graph_->warm_up([this] { output_ = train_step(parts_, images_, labels_, options_); });
    return output_;
  }
  if (!graph_->captured() && !capture(images.size(0))) return run_eagerly(images_, labels_);
  graph_->replay();
  last_replayed_ = true;
  return output_;
}

bool GraphedStep::capture(int64_t batch) {
  // The warm-up's gradients and outputs are freed now, outside the capture; the captured
  // backward allocates the gradients anew in the graph's pool.
  parts_.optimizer->zero_grad(/*set_to_none=*/true);
  output_ = StepResult{};
  try {
    graph_->capture([this] { output_ = train_step(parts_, images_, labels_, options_); });
  } catch (const std::exception& e) {
    if (!eager_if_capture_fails_) throw;
    // Whatever the failed capture left (gradients in its released pool) is dropped; nothing it
    // recorded ran, so the eager step starts from the weights and state of the last real step.
    parts_.optimizer->zero_grad(/*set_to_none=*/true);
    output_ = StepResult{};
    graph_.reset();
    eager_ = true;
    spdlog::warn(
        "training.cuda_graph: auto: capturing the training step failed ({}); training goes on "
        "with the eager step",
        error_line(e));
    return false;
  }
  spdlog::info(
      "training step captured in a CUDA graph after {} warm-up steps (batch {}); its memory "
      "pool holds {:.1f} MiB, {:.1f} MiB reserved on {} in all",
      kWarmupSteps, batch, static_cast<double>(graph_->pool_bytes()) / kMiB,
      static_cast<double>(memory_stats(device_).reserved) / (1 << 20), device_.str());
  return true;
}

}  // namespace training
