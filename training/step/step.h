// One training step, shared by the trainer and the sweep's trials so that what a sweep measures
// is exactly what training runs.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "models/resnet.h"
#include "training/platform/distributed.h"
#include "training/step/amp.h"
#include "training/step/ema.h"

namespace training {

struct StepResult {
  torch::Tensor loss;    // float32 scalar, unscaled, detached
  torch::Tensor logits;  // detached
  // Whether this micro-batch ended an optimizer step (the last of options.accumulate_steps).
  bool last_micro_batch = true;
  // At the last micro-batch: false when fp16 gradients overflowed and the step was skipped.
  bool stepped = true;
};

// One of two observer interfaces, split by where they look: this one sees inside one micro-batch
// (its phases, for the memory studies: studies/memory_breakdown.h); loop/observer.h's LoopObserver
// sees the loop between steps. train_step calls each at the boundary it names.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void forward_begins() {}  // after the gradients were dropped
  virtual void forward_ends() {}    // after the loss, while autocast (and its cast cache) is on
  virtual void backward_begins() {}
  virtual void optimizer_begins() {}  // after backward; the GradScaler's checks come after it
  virtual void step_ends() {}
};

// What a training step changes (training/parts/components.h builds them from the config).
struct StepParts {
  models::ResNet model;
  std::unique_ptr<torch::optim::SGD> optimizer;
  GradScaler scaler;                   // enabled for fp16
  std::unique_ptr<WeightAverage> ema;  // null unless training.ema_decay > 0
};

struct StepOptions {
  using AveragerPtr = ProcessGroup::GradientAverager*;  // (TORCH_ARG needs one-word types)
  using ObserverPtr = StepObserver*;

  TORCH_ARG(Precision, precision) = Precision::FP32;  // autocast's
  TORCH_ARG(double, label_smoothing) = 0.0;
  // Micro-batches per optimizer step (training.accumulate_steps).
  TORCH_ARG(int64_t, accumulate_steps) = 1;
  // Data-parallel training: averages the gradients across ranks during the backward of an
  // optimizer step's last micro-batch (once per optimizer step; the others accumulate locally).
  TORCH_ARG(AveragerPtr, averager) = nullptr;
  TORCH_ARG(ObserverPtr, observer) = nullptr;  // memory studies
};

// Micro-batch `micro` of an optimizer step: the first drops the gradients; each runs forward under
// autocast, cross-entropy and the (scaled) backward of loss / accumulate_steps, so the gradients
// add up to the mean over the effective batch. The last takes the optimizer step unless the
// GradScaler found inf/NaN gradients (an overflow skips the whole group), updates the scaler and,
// after a step taken, the weight average.
StepResult train_step(StepParts& parts, const torch::Tensor& images, const torch::Tensor& labels,
                      const StepOptions& options = {}, int64_t micro = 0);

// What training keeps of an optimizer step's micro-batches on the device (read back only at log
// intervals): the loss times the images, and the correct predictions, summed. A measurement of
// the step (a sweep trial) keeps them too, as training holds them beside its next step.
struct StepSums {
  torch::Tensor loss_sum, correct;
  int64_t images = 0;
  // Adds micro-batch `result` of `labels`; the first sets the sums.
  void add(const StepResult& result, const torch::Tensor& labels);
};

// A copy of the model's buffers (BatchNorm's statistics), held through each optimizer step of
// several micro-batches to put back where a stop comes between two (measurements hold it too).
std::vector<torch::Tensor> copy_buffers(const torch::nn::Module& model);
void restore_buffers(torch::nn::Module& model, const std::vector<torch::Tensor>& copies);

}  // namespace training
