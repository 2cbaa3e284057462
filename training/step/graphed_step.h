// The training step captured once in a CUDA graph and replayed (training.cuda_graph). On small
// images a ResNet step is hundreds of short kernels, and launching them from the host costs as
// much as running them; a replay launches the whole step (forward, loss, backward, optimizer) at
// once. This is the gain PyTorch users get from torch.compile's CUDA graphs.
//
// The first kWarmupSteps steps run eagerly on the graph's side stream (cuDNN's search, cuBLAS's
// workspaces and the momentum are made there), the next is captured and replayed, and every later
// one replays; each is a real step on run()'s batch, copied into static inputs. The learning rate
// lives in the FusedSGD's device tensor, so schedules work; the weight average's update is in the
// graph; gradients live in its private pool; evaluation stays eager. A failed capture is rethrown
// (on), or with eager_if_capture_fails (auto) said once and the step run eagerly from then on (the
// capture ran nothing on the device).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>

#include "training/platform/device.h"
#include "training/step/amp.h"
#include "training/step/step.h"

namespace training {

class GraphedStep {
 public:
  static constexpr int64_t kWarmupSteps = 3;
  // Makes the graph for each new shape; by default a DeviceGraph on the step's device (tests
  // pass one that emulates a graph on the CPU).
  using MakeGraph = std::function<std::unique_ptr<Graph>()>;

  // `parts` must outlive this step; its optimizer must be a FusedSGD, switched here to its device
  // learning rate. Throws UserError on the CPU (DeviceGraph's) unless `make_graph` is given.
  // `options` must have no averager (graphs refuse data-parallel training) and no observer.
  GraphedStep(StepParts& parts, StepOptions options, const torch::Device& device,
              bool eager_if_capture_fails = false, MakeGraph make_graph = {});

  // One training step on (images, labels): a warm-up step, the capture and its first replay, or a
  // replay. A new shape (another batch size) starts again with a new graph. Once captured, the
  // result's tensors are the graph's outputs: read them before the next run.
  StepResult run(const torch::Tensor& images, const torch::Tensor& labels);

  bool captured() const { return graph_ && graph_->captured(); }
  int64_t pool_bytes() const { return graph_ ? graph_->pool_bytes() : 0; }
  // Whether the last run() replayed the graph (false for warm-up steps and eager ones).
  bool last_run_replayed() const { return last_replayed_; }
  // Whether a failed capture switched this step to the eager one for good.
  bool fell_back_to_eager() const { return eager_; }

 private:
  StepResult run_eagerly(const torch::Tensor& images, const torch::Tensor& labels);
  // Captures the step; false when the capture failed and the step falls back to eager.
  bool capture(int64_t batch);

  StepParts& parts_;
  StepOptions options_;
  torch::Device device_;
  bool eager_if_capture_fails_;
  bool eager_ = false;
  bool last_replayed_ = false;
  MakeGraph make_graph_;
  std::unique_ptr<Graph> graph_;
  torch::Tensor images_, labels_;  // the static inputs the graph reads
  StepResult output_;              // the static outputs it writes
  int64_t steps_ = 0;              // steps run with this graph's shape
};

}  // namespace training
