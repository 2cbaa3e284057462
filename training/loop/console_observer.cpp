#include "training/loop/console_observer.h"

#include <spdlog/spdlog.h>

#include "training/platform/memory.h"
#include "training/platform/statistics.h"
#include "training/run/diagnosis.h"

namespace training {

ConsoleObserver::ConsoleObserver(const Config& config, torch::Device device)
    : config_(config), device_(device) {}

void ConsoleObserver::on_epoch_end(const EpochRecord& r) {
  spdlog::info(
      "epoch {}/{}  step {}  train loss {:.4f} acc {:.2f}%  test loss {:.4f} acc {:.2f}%  "
      "lr {:.4g}  {:.1f} s  {} img/s  peak {:.1f} MiB training, {:.1f} MiB evaluation "
      "(allocated{})",
      r.epoch, config_.training.epochs, r.step, r.train_loss, 100 * r.train_acc, r.test_loss,
      100 * r.test_acc, r.lr, r.epoch_seconds, rate_text(r.images_per_second),
      to_mib(r.train_peak_allocated_bytes), to_mib(r.eval_peak_allocated_bytes),
      r.train_peak_reserved_bytes
          ? fmt::format("; reserved {:.1f} / {:.1f} MiB", to_mib(*r.train_peak_reserved_bytes),
                        to_mib(*r.eval_peak_reserved_bytes))
          : std::string());
  if (r.eval_peak_allocated_bytes > r.train_peak_allocated_bytes && !said_evaluation_peak_) {
    said_evaluation_peak_ = true;
    spdlog::info(
        "memory: evaluation sets this run's peak ({:.1f} MiB against {:.1f} MiB for training); "
        "a smaller training.eval_batch_size (now {}) lowers it without changing any result",
        to_mib(r.eval_peak_allocated_bytes), to_mib(r.train_peak_allocated_bytes),
        config_.training.eval_batch_size);
  }
  if (r.grad_scale) {
    spdlog::info("fp16 loss scale {:.0f}, {} step(s) skipped this epoch (inf/NaN gradients)",
                 *r.grad_scale, r.skipped_steps);
  }
  const Diagnosis diagnosis =
      diagnose(r.data_wait_fraction, r.utilization_mean, device_.is_cuda(), config_.monitor,
               prefetch_for(config_.data, device_.is_cuda()));
  for (const auto& finding : diagnosis.findings) spdlog::warn("{}", finding);
}

}  // namespace training
