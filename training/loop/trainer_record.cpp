// The Trainer's epoch record: the epoch's sums, times and peaks over all ranks, written to the run
// and told to the observers (trainer.h).
#include <spdlog/spdlog.h>

#include "training/loop/trainer.h"
#include "training/platform/duration.h"
#include "training/platform/stop_signal.h"

namespace training {

EpochRecord Trainer::record_epoch(int64_t epoch, const Evaluation& evaluation) {
  EpochRecord r;
  r.epoch = epoch;
  r.step = state_.step;
  r.lr = last_lr_;
  r.world_size = group_ ? group_->world_size() : 1;
  // Over all ranks: sums of loss, hits and samples; the slowest rank's time.
  const auto on_device = torch::TensorOptions(torch::kFloat64).device(device_);
  auto loss_sum = state_.loss_sum.clone(), correct = state_.correct.clone();
  auto seen_total = torch::full({}, static_cast<double>(state_.seen), on_device);
  auto seconds = torch::full({}, state_.train_seconds, on_device);
  auto steady_images = torch::full({}, static_cast<double>(timing_.steady_images()), on_device);
  auto steady_seconds = torch::full({}, timing_.steady_seconds(), on_device);
  all_reduce_sum({loss_sum, correct, seen_total, steady_images});
  all_reduce_max({seconds, steady_seconds});
  const double seen = std::max(seen_total.item<double>(), 1.0);
  r.epoch_seconds = seconds.item<double>();
  r.warmup_steps = timing_.warmup_steps();
  r.warmup_seconds = timing_.warmup_seconds();
  if (timing_.steady_images() > 0 && steady_seconds.item<double>() > 0) {
    r.steady_images_per_second = steady_images.item<double>() / steady_seconds.item<double>();
  }
  r.batches = state_.batch_in_epoch;
  r.epoch_batches = batches_per_epoch();
  r.accumulate_steps = accumulate_steps_;
  r.effective_batch_size = effective_batch_size(config_, r.world_size);
  r.train_loss = loss_sum.item<double>() / seen;
  r.train_acc = static_cast<double>(correct.item<int64_t>()) / seen;
  r.images_per_second = seen / std::max(r.epoch_seconds, 1e-9);
  r.test_loss = evaluation.loss;
  r.test_acc = evaluation.accuracy;
  r.eval_seconds = evaluation.seconds;
  record_memory(r, evaluation.memory);
  r.skipped_steps = state_.skipped_steps;
  if (parts_.scaler.enabled()) r.grad_scale = parts_.scaler.current_scale();
  // Where the training time went. The epoch's wall time is device-synchronised at both ends; the
  // wait for data is host time blocked in the loader, the rest is forward/backward/step.
  r.data_seconds = std::min(data_seconds_, state_.train_seconds);
  r.compute_seconds = state_.train_seconds - r.data_seconds;
  r.data_wait_fraction = state_.train_seconds > 0 ? r.data_seconds / state_.train_seconds : 0.0;
  observers_.complete_record(r);
  if (run_) {
    write_pending_inputs();
    run_->record_epoch(r);
    test_kill_point("epoch-row");  // tests: a death between the row and its checkpoint
    for (const auto& c : accuracy_crossings(run_->epochs(), config_.training.accuracy_thresholds)) {
      if (c.epoch != r.epoch) continue;  // logged when it happened
      spdlog::info(
          "time to accuracy: {:g}% test accuracy first reached in epoch {} (step {}), "
          "after {} of training and evaluation",
          100 * c.threshold, c.epoch, c.step, format_duration(c.seconds));
    }
  }
  observers_.on_epoch_end(r);
  return r;
}

void Trainer::record_memory(EpochRecord& r, const MemoryStats& evaluation) {
  // Each phase's peaks (the largest over the ranks); the overall columns are the larger of the
  // two. Reserved bytes exist on CUDA only (on the CPU the tracking allocator holds nothing back).
  auto peaks = torch::tensor({static_cast<double>(train_memory_.peak_allocated),
                              static_cast<double>(train_memory_.peak_reserved),
                              static_cast<double>(evaluation.peak_allocated),
                              static_cast<double>(evaluation.peak_reserved)},
                             torch::TensorOptions(torch::kFloat64).device(device_));
  all_reduce_max({peaks});
  const auto peak = peaks.cpu();
  const auto bytes = [&](int64_t i) { return static_cast<int64_t>(peak[i].item<double>()); };
  const auto reserved = [&](int64_t value) {
    return device_.is_cuda() ? std::optional<int64_t>(value) : std::nullopt;
  };
  r.device = device_.str();
  r.train_peak_allocated_bytes = bytes(0);
  r.train_peak_reserved_bytes = reserved(bytes(1));
  r.eval_peak_allocated_bytes = bytes(2);
  r.eval_peak_reserved_bytes = reserved(bytes(3));
  r.peak_allocated_bytes = std::max(bytes(0), bytes(2));
  r.peak_reserved_bytes = reserved(std::max(bytes(1), bytes(3)));
}

}  // namespace training
