#include "training/step.h"

namespace training {

namespace F = torch::nn::functional;

StepResult train_step(models::ResNet& model, torch::optim::Optimizer& optimizer, GradScaler& scaler,
                      Precision precision, double label_smoothing, const torch::Tensor& images,
                      const torch::Tensor& labels, ProcessGroup::GradientAverager* averager,
                      StepObserver* observer) {
  StepObserver none;
  StepObserver& phases = observer ? *observer : none;
  optimizer.zero_grad(/*set_to_none=*/true);
  phases.forward_begins();
  torch::Tensor logits, loss;
  {
    AutocastGuard autocast(images.device().type(), precision);
    logits = model->forward(images);
    // Autocast runs cross-entropy in float32 whatever the precision.
    loss = F::cross_entropy(logits, labels,
                            F::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
    phases.forward_ends();
  }
  if (averager) averager->prepare(logits);
  phases.backward_begins();
  scaler.scale(loss).backward();
  phases.optimizer_begins();
  const bool stepped = scaler.step(optimizer);
  scaler.update();
  phases.step_ends();
  return {loss.detach(), logits.detach(), stepped};
}

}  // namespace training
