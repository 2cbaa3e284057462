#include "training/step/step.h"

namespace training {

namespace F = torch::nn::functional;

StepResult train_step(StepParts& parts, const torch::Tensor& images, const torch::Tensor& labels,
                      const StepOptions& options, int64_t micro) {
  StepObserver none;
  StepObserver& phases = options.observer() ? *options.observer() : none;
  const int64_t micro_batches = options.accumulate_steps();
  const bool last = micro == micro_batches - 1;
  if (micro == 0) parts.optimizer->zero_grad(/*set_to_none=*/true);
  phases.forward_begins();
  torch::Tensor logits, loss;
  {
    AutocastGuard autocast(images.device().type(), options.precision());
    logits = parts.model->forward(images);
    // Autocast runs cross-entropy in float32 whatever the precision.
    loss = F::cross_entropy(
        logits, labels, F::CrossEntropyFuncOptions().label_smoothing(options.label_smoothing()));
    phases.forward_ends();
  }
  // The reducer averages during this backward only; before, gradients add up locally (as DDP's
  // no_sync).
  if (options.averager() && last) options.averager()->prepare(logits);
  phases.backward_begins();
  parts.scaler.scale(micro_batches > 1 ? loss / micro_batches : loss).backward();
  if (!last) return {loss.detach(), logits.detach(), /*last_micro_batch=*/false, true};
  phases.optimizer_begins();
  const bool stepped = parts.scaler.step(*parts.optimizer);
  parts.scaler.update();
  // In place, so it adds no memory. Captured by a graph, it runs on every replay: graphs refuse
  // fp16, the one precision whose steps can be skipped.
  if (parts.ema && stepped) parts.ema->update();
  phases.step_ends();
  return {loss.detach(), logits.detach(), /*last_micro_batch=*/true, stepped};
}

void StepSums::add(const StepResult& result, const torch::Tensor& labels) {
  torch::NoGradGuard no_grad;
  const int64_t count = labels.size(0);
  const auto loss = result.loss.to(torch::kFloat64) * count;
  const auto right = result.logits.argmax(1).eq(labels).sum();
  loss_sum = images == 0 ? loss : loss_sum + loss;
  correct = images == 0 ? right : correct + right;
  images += count;
}

std::vector<torch::Tensor> copy_buffers(const torch::nn::Module& model) {
  std::vector<torch::Tensor> copies;
  for (const auto& b : model.buffers()) copies.push_back(b.detach().clone());
  return copies;
}

void restore_buffers(torch::nn::Module& model, const std::vector<torch::Tensor>& copies) {
  torch::NoGradGuard no_grad;
  const auto buffers = model.buffers();
  for (size_t i = 0; i < copies.size(); ++i) buffers[i].copy_(copies[i]);
}

}  // namespace training
