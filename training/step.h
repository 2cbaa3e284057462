// One training step, shared by the trainer and the sweep's trials so that what a sweep measures
// is exactly what training runs.
#pragma once

#include <torch/torch.h>

#include "models/resnet.h"
#include "training/amp.h"
#include "training/platform/distributed.h"

namespace training {

struct StepResult {
  torch::Tensor loss;    // float32 scalar, unscaled, detached
  torch::Tensor logits;  // detached
  bool stepped = true;   // false when fp16 gradients overflowed and the step was skipped
};

// Told where a step is (memory studies, see studies/memory_breakdown.h): train_step calls each
// at the boundary it names.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void forward_begins() {}  // after the gradients were dropped
  virtual void forward_ends() {}    // after the loss, while autocast (and its cast cache) is on
  virtual void backward_begins() {}
  virtual void optimizer_begins() {}  // after backward; the GradScaler's checks come after it
  virtual void step_ends() {}
};

// Forward under autocast (precision), cross-entropy, (scaled) backward, then the optimizer step
// unless the GradScaler found inf/NaN gradients; then the scaler's update. With an averager
// (data-parallel training) the gradients are averaged across ranks during backward.
StepResult train_step(models::ResNet& model, torch::optim::Optimizer& optimizer, GradScaler& scaler,
                      Precision precision, double label_smoothing, const torch::Tensor& images,
                      const torch::Tensor& labels,
                      ProcessGroup::GradientAverager* averager = nullptr,
                      StepObserver* observer = nullptr);

}  // namespace training
