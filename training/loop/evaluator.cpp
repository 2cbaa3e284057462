#include "training/loop/evaluator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "training/platform/device.h"
#include "training/platform/duration.h"
#include "training/platform/heartbeat.h"
#include "training/step/amp.h"

namespace training {

namespace F = torch::nn::functional;

namespace {

torch::Tensor zero(torch::Dtype dtype, torch::Device device) {
  return torch::zeros({}, torch::TensorOptions(dtype).device(device));
}

}  // namespace

Evaluator::Evaluator(const Config& config, torch::Device device, ProcessGroup* group)
    : config_(config), device_(device), group_(group) {}

Evaluation Evaluator::run(models::ResNet& model, data::Loader& loader) {
  evaluating_ = true;
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device_.type(), config_.training.precision);
  synchronize(device_);
  reset_peak_memory(device_);  // evaluation's peak is its own
  const auto start = std::chrono::steady_clock::now();
  auto loss_sum = zero(torch::kFloat64, device_);
  auto correct = zero(torch::kInt64, device_);
  if (group_) group_->broadcast_buffers(*model);  // every rank evaluates with rank 0's statistics
  loader.start_epoch(0);
  std::optional<Heartbeat> beat(std::in_place, "evaluation", loader.batches_per_epoch(), "batches");
  int64_t batches = 0, images = 0;
  for (;;) {
    const int64_t size = loader.batch_size();
    auto batch = next_batch(loader);
    if (loader.batch_size() != size) {  // in smaller batches, from the first: none counted twice
      loss_sum.zero_();
      correct.zero_();
      batches = images = 0;
      beat.reset();
      beat.emplace("evaluation", loader.batches_per_epoch(), "batches");
    }
    if (!batch) break;
    add_batch(model, batch->images, batch->labels, loss_sum, correct);
    images += batch->labels.size(0);
    beat->advance(++batches, images);
  }
  auto count = torch::full({}, static_cast<double>(loader.shard_size()),
                           torch::TensorOptions(torch::kFloat64).device(device_));
  if (group_) {  // each rank evaluated its shard of the test set
    std::vector<torch::Tensor> sums = {loss_sum, correct, count};
    group_->all_reduce(sums);
  }
  const double n = count.item<double>();
  Evaluation evaluation{loss_sum.item<double>() / n, correct.item<int64_t>() / n, 0.0, {}};
  evaluation.seconds = seconds_since(start);
  evaluation.memory = memory_stats(device_);
  evaluating_ = false;
  return evaluation;
}

std::optional<data::Batch> Evaluator::next_batch(data::Loader& loader) {
  for (;;) {
    // A batch holds at most the shard (eval_batch_size may be larger than the split).
    const int64_t size = std::min(loader.batch_size(), loader.shard_size());
    try {
      return loader.next();
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      failed_at_one_image_ = size == 1;
      if (size == 1) throw;
      loader.set_batch_size(size / 2);
      spdlog::warn(
          "memory: evaluation ran out of memory making a batch of {} images; it starts again in "
          "batches of {} (training.eval_batch_size {}; the results do not depend on it)",
          size, size / 2, config_.training.eval_batch_size);
      loader.start_epoch(0);
    }
  }
}

void Evaluator::add_batch(models::ResNet& model, const torch::Tensor& images,
                          const torch::Tensor& labels, torch::Tensor& loss_sum,
                          torch::Tensor& correct) {
  const int64_t n = labels.size(0);
  for (int64_t begin = 0; begin < n;) {
    const int64_t size = std::min(chunk_ > 0 ? chunk_ : n, n - begin);
    try {
      const auto chunk = images.narrow(0, begin, size);
      const auto chunk_labels = labels.narrow(0, begin, size);
      auto logits = model->forward(chunk);
      if (config_.training.eval_flip) {  // the image and its mirror image (NCHW: width is dim 3)
        logits =
            (logits.to(torch::kFloat32) + model->forward(chunk.flip({3})).to(torch::kFloat32)) / 2;
      }
      // Each image's loss, summed in float64: a float32 sum over the chunk would depend on the
      // chunk size (the 7th digit), which an out-of-memory split changes.
      const auto loss = F::cross_entropy(logits.to(torch::kFloat32), chunk_labels,
                                         F::CrossEntropyFuncOptions().reduction(torch::kNone))
                            .to(torch::kFloat64)
                            .sum();
      const auto hits = logits.argmax(1).eq(chunk_labels).sum();
      loss_sum += loss.to(torch::kFloat64);  // added only once the whole chunk went through
      correct += hits;
      begin += size;
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      failed_at_one_image_ = size == 1;
      if (size == 1) throw;
      chunk_ = size / 2;
      spdlog::warn(
          "memory: evaluation ran out of memory at {} images per forward pass; it goes on in "
          "chunks of {} (training.eval_batch_size {}; the results do not depend on it)",
          size, chunk_, config_.training.eval_batch_size);
    }
  }
}

void Evaluator::check_fits(models::ResNet& model, data::Loader& loader) {
  if (!memory_bounded()) return;  // its peak is not the epoch's (reset after)
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device_.type(), config_.training.precision);
  loader.start_epoch(0);
  evaluating_ = true;  // making the test batch is the evaluation's too (its out of memory says so)
  if (auto batch = next_batch(loader)) {
    auto loss_sum = zero(torch::kFloat64, device_);
    auto correct = zero(torch::kInt64, device_);
    Heartbeat beat("evaluation probe: one test batch of " + std::to_string(batch->labels.size(0)) +
                   " images before the first step");
    add_batch(model, batch->images, batch->labels, loss_sum, correct);
  }
  evaluating_ = false;
  // Nothing left held: a restarted loader would hold prefetched test batches through the training
  // epoch, one batch more than the checkpointing choice counted.
  loader.stop();
}

}  // namespace training
