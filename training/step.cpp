#include "training/step.h"

#include "training/config.h"
#include "training/device.h"
#include "training/recompute.h"

namespace training {

models::ResNet build_model(const Config& config, const torch::Device& device) {
  // Seeding first makes the initial weights a function of training.seed alone.
  seed_everything(static_cast<uint64_t>(config.training.seed));
  models::ResNet model(config.model);
  model->to(device);
  models::convert_memory_format(*model, config.training.memory_format);
  apply_checkpointing(*model, config.checkpointing);
  return model;
}

namespace F = torch::nn::functional;

StepResult train_step(models::ResNet& model, torch::optim::Optimizer& optimizer, GradScaler& scaler,
                      Precision precision, double label_smoothing, const torch::Tensor& images,
                      const torch::Tensor& labels, ProcessGroup::GradientAverager* averager) {
  optimizer.zero_grad(/*set_to_none=*/true);
  torch::Tensor logits, loss;
  {
    AutocastGuard autocast(images.device().type(), precision);
    logits = model->forward(images);
    // Autocast runs cross-entropy in float32 whatever the precision.
    loss = F::cross_entropy(logits, labels,
                            F::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
  }
  if (averager) averager->prepare(logits);
  scaler.scale(loss).backward();
  const bool stepped = scaler.step(optimizer);
  scaler.update();
  return {loss.detach(), logits.detach(), stepped};
}

}  // namespace training
