#include "training/loop/trainer.h"

#include <ATen/record_function.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "data/dataset.h"
#include "training/loop/console_observer.h"
#include "training/loop/instruments.h"
#include "training/loop/progress.h"
#include "training/loop/tensorboard_observer.h"
#include "training/platform/device.h"
#include "training/platform/duration.h"
#include "training/platform/errors.h"
#include "training/platform/heartbeat.h"
#include "training/platform/process.h"
#include "training/platform/stop_signal.h"
#include "training/run/diagnosis.h"
#include "training/step/optim.h"
#include "training/step/step.h"

namespace training {

namespace {

using Clock = std::chrono::steady_clock;

// Why the training set holds `images` and what makes it larger: the key that set its size
// (data.train_limit or data.synthetic_train_size), or none when it is the whole data set.
std::string training_set_size(const Config& config, int64_t images) {
  const auto& d = config.data.dataset;
  const bool synthetic = data::resolve_source(d) == data::Source::Synthetic;
  // The limit set the size when it cut the set: below what the source holds.
  const bool limited = d.train_limit() > 0 && d.train_limit() <= images &&
                       (!synthetic || d.train_limit() < d.synthetic_train_size());
  const std::string key = limited     ? "data.train_limit"
                          : synthetic ? "data.synthetic_train_size"
                                      : "";
  return std::to_string(images) + " images" +
         (key.empty() ? ", the whole data set" : " by " + key) +
         "), so an epoch has no full batch; lower it" + (key.empty() ? "" : " or raise " + key);
}

// Epoch `done` is trained through: the state moves on to the next one.
void start_next_epoch(TrainState& state, int64_t done) {
  state.epoch = done;
  state.batch_in_epoch = 0;
  state.seen = 0;
  state.train_seconds = 0;
  state.skipped_steps = 0;
  state.peak_allocated = state.peak_reserved = 0;
}

}  // namespace

Trainer::Trainer(const Config& config, torch::Device device, data::Split train, data::Split test,
                 ProcessGroup* group)
    : config_(config),
      inputs_{run_yaml(config), ""},
      accumulate_steps_(config.training.accumulate_steps),
      device_(device),
      run_(nullptr),
      group_(group),
      parts_(build_step_parts(config, device, group)),
      train_loader_((check_labels(train, "training", config.model.num_classes()),
                     make_loader(std::move(train), config, device, /*train=*/true, group))),
      test_loader_((check_labels(test, "test", config.model.num_classes()),
                    make_loader(std::move(test), config, device, /*train=*/false, group))),
      averager_(group ? group->gradient_averager(*parts_.model) : nullptr),
      graphed_(
          use_cuda_graph(config, device, group != nullptr)
              ? std::make_unique<GraphedStep>(
                    parts_, step_options(config), device,
                    /*eager_if_capture_fails=*/config.training.cuda_graph == CudaGraphMode::Auto)
              : nullptr),
      total_steps_(planned_steps(config, steps_per_epoch(), nullptr)),
      schedule_(config.schedule, config.optimizer.lr(), steps_per_epoch(), total_steps_),
      timing_(device),
      evaluator_(config_, device, group) {
  check_steps(config, train_loader_->dataset_size(), world_size());
  if (const int64_t dropped = train_loader_->batches_per_epoch() - batches_per_epoch()) {
    spdlog::info(
        "training.accumulate_steps {}: an epoch's {} batches make {} optimizer steps; its last {} "
        "batch(es), an incomplete group, are dropped each epoch (as a partial batch is)",
        accumulate_steps_, train_loader_->batches_per_epoch(), steps_per_epoch(), dropped);
  }
  observers_.add(std::make_unique<ConsoleObserver>(config_, device_));
}

int64_t Trainer::planned_steps(const Config& config, int64_t steps_per_epoch,
                               const TrainState* resumed) {
  const int64_t epochs = config.training.epochs;
  if (!resumed) return capped_by_max_steps(config, epochs * steps_per_epoch);
  const int64_t before_epoch =
      resumed->step - resumed->batch_in_epoch / config.training.accumulate_steps;
  return capped_by_max_steps(config, before_epoch + (epochs - resumed->epoch) * steps_per_epoch);
}

void Trainer::check_steps(const Config& config, int64_t train_size, int64_t world_size,
                          const TrainState* resumed) {
  const int64_t batches = data::batch_count(
      train_size,
      data::LoaderOptions().batch_size(config.training.batch_size).shard_count(world_size));
  if (batches == 0) {
    throw KeyError("training.batch_size", std::to_string(config.training.batch_size) +
                                              " is larger than the training set (" +
                                              training_set_size(config, train_size));
  }
  const int64_t steps = batches / config.training.accumulate_steps;
  if (steps == 0) {
    throw KeyError("training.accumulate_steps",
                   std::to_string(config.training.accumulate_steps) +
                       " micro-batches per optimizer step, but an epoch has " +
                       std::to_string(batches) + " full batch(es) of " +
                       std::to_string(config.training.batch_size) +
                       ", so it has no whole step; lower it or training.batch_size");
  }
  check_profiler_window(config, resumed ? resumed->step : 0, planned_steps(config, steps, resumed));
}

std::string Trainer::resume_command() const {
  // The program as it was run (advised_program): a bare `train` may be on no PATH.
  const std::string resume = advised_program() + " --resume ";
  if (run_) return resume + shell_word(run_->path().string());
  if (!run_path_.empty()) return resume + shell_word(run_path_.string());
  return resume + "with rank 0's run directory (rank 0's log names it)";
}

void Trainer::write_to(RunDirectory& run) {
  run_ = &run;
  if (auto sampler = make_sampler(config_.monitor, device_, run.path() / "gpu.jsonl")) {
    observers_.add(std::make_unique<SamplerObserver>(std::move(sampler)));
  }
  if (config_.monitor.tensorboard)
    observers_.add(std::make_unique<TensorBoardObserver>(run.path()));
  if (config_.profiler.enabled) {
    observers_.add(
        std::make_unique<StepWindowObserver<StepProfiler>>(std::make_unique<StepProfiler>(
            profiler_options(config_.profiler), run.path() / "trace.json", device_)));
  }
  if (config_.memory.snapshot) {
    observers_.add(std::make_unique<StepWindowObserver<StepMemorySnapshot>>(
        std::make_unique<StepMemorySnapshot>(
            config_.profiler.steps.at(0), config_.profiler.steps.at(1),
            config_.memory.snapshot_max_entries, run.path() / "memory_snapshot.pickle", device_)));
  }
}

std::vector<torch::Tensor> Trainer::held_from_the_first_update() const {
  std::vector<torch::Tensor> held;
  const bool momentum = config_.optimizer.momentum() > 0;
  const auto& state = parts_.optimizer->state();
  for (const auto& p : parts_.model->parameters()) {
    if (keeps_gradients() && !p.grad().defined()) held.push_back(torch::empty_like(p));
    if (momentum && state.find(p.unsafeGetTensorImpl()) == state.end()) {
      held.push_back(torch::empty_like(p));
    }
  }
  return held;
}

Evaluation Trainer::evaluate() {
  // Held through the evaluation, they made it need more than the step: bf16, offered for an fp32
  // run out of memory, then ran out of memory evaluating one image.
  if (!keeps_gradients()) parts_.optimizer->zero_grad(/*set_to_none=*/true);
  return evaluator_.run(evaluated_model(), *test_loader_);
}

FitEnd Trainer::fit() {
  const bool training = state_.epoch < config_.training.epochs && state_.step < total_steps_;
  if (training && evaluator_.memory_bounded()) {
    // Evaluation runs after training's updates, beside their momentum: the probe that says
    // before the first step whether it fits holds it too.
    const auto held = held_from_the_first_update();
    evaluator_.check_fits(evaluated_model(), *test_loader_);
  }
  parts_.model->train();
  observers_.on_fit_start(state_, training);
  // A start checkpoint: wherever the process dies from here on (kill -9 included), a checkpoint
  // exists and the rows ahead of it are trained again on resume.
  if (training && state_.step == 0 && state_.batch_in_epoch == 0) save();
  while (state_.epoch < config_.training.epochs && state_.step < total_steps_) {
    const bool finished = train_epoch();
    if (!finished && stopping_) {
      spdlog::warn("stopped by signal {}; {}", position_text(state_), save_on_stop());
      return FitEnd::Stopped;
    }
    const int64_t epoch = state_.epoch + 1;
    const EpochRecord record = record_epoch(epoch, evaluate());
    if (diverged(record)) return end_diverged(record);
    if (finished) start_next_epoch(state_, epoch);
    save();
  }
  observers_.on_fit_end(state_.step);
  return FitEnd::Finished;
}

bool Trainer::train_epoch() {
  parts_.model->train();
  const int64_t epoch = state_.epoch + 1;
  const int64_t batches = batches_per_epoch();
  if (state_.batch_in_epoch == 0) {
    state_.loss_sum = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device_));
    state_.correct = torch::zeros({}, torch::TensorOptions(torch::kInt64).device(device_));
  }
  train_loader_->start_epoch(epoch, state_.batch_in_epoch);
  synchronize(device_);
  reset_peak_memory(device_);
  observers_.on_epoch_start(epoch);
  const auto start = Clock::now();
  const double seconds_before = state_.train_seconds;
  auto interval_start = start;
  int64_t interval_images = 0;
  data_seconds_ = 0;
  timing_.begin_epoch(start);
  // Until the first progress line (3 steps and 10 s), a long step would leave the log silent: the
  // heartbeat says where training is, from its own thread (10 s, then every 30 s).
  const int64_t first_step = state_.step, first_seen = state_.seen;
  std::optional<Heartbeat> first_steps;
  if (!shown_line_) {
    first_steps.emplace("training: epoch " + std::to_string(epoch),
                        std::min(total_steps_ - state_.step, steps_per_epoch() - steps_in_epoch()),
                        "steps");
  }

  while (state_.step < total_steps_ && state_.batch_in_epoch < batches && !diverged_ &&
         !stop_now()) {
    const auto group = train_group(epoch);
    if (!group) break;  // the data ended, or a stop came part-way through the group
    // Accumulated on the device; read back only at log intervals so steps stay asynchronous.
    state_.loss_sum += group->loss_sum;
    state_.correct += group->correct;
    state_.seen += group->images;
    interval_images += group->images;
    ++state_.step;
    state_.batch_in_epoch += accumulate_steps_;
    if (timing_.count_step(group->images)) judge_cpu_run_length();
    if (first_steps) first_steps->advance(state_.step - first_step, state_.seen - first_seen);
    if (interval_due()) {
      first_steps.reset();  // the progress lines take over
      observers_.on_interval(read_interval(epoch, batches, interval_start, interval_images));
      interval_start = last_line_ = Clock::now();
      interval_images = 0;
      shown_line_ = true;
    }
  }
  synchronize(device_);
  state_.train_seconds = seconds_before + timing_.end_epoch(start);
  train_memory_ = memory_stats(device_);  // with the peaks before a resume part-way through it
  train_memory_.peak_allocated = std::max(train_memory_.peak_allocated, state_.peak_allocated);
  train_memory_.peak_reserved = std::max(train_memory_.peak_reserved, state_.peak_reserved);
  observers_.on_training_end();
  return state_.batch_in_epoch == batches;
}

std::optional<StepSums> Trainer::train_group(int64_t epoch) {
  StepSums sums;
  // Restarting a group stopped part-way needs the BatchNorm statistics it started from.
  std::vector<torch::Tensor> buffers_at_start;
  for (int64_t micro = 0; micro < accumulate_steps_; ++micro) {
    if (micro > 0 && !group_) {
      test_stop_point(fmt::format("step {} micro-batch {}", state_.step + 1, micro + 1));
      if ((stopping_ = stop_requested())) {
        restore_buffers(*parts_.model, buffers_at_start);
        return std::nullopt;
      }
    }
    // Host time blocked waiting for the next batch: the input pipeline's share of the epoch.
    const auto wait_start = Clock::now();
    auto batch = train_loader_->next();
    data_seconds_ += seconds_since(wait_start);
    if (!batch) return std::nullopt;
    if (micro == 0) {
      last_lr_ = schedule_.at(state_.step);
      set_learning_rate(*parts_.optimizer, last_lr_);
      observers_.on_batch(epoch, state_.step + 1);
      if (group_) group_->broadcast_buffers(*parts_.model);  // as DDP's broadcast_buffers
      observers_.before_step(state_.step + 1);
      if (accumulate_steps_ > 1 && !group_) buffers_at_start = copy_buffers(*parts_.model);
    }
    const StepResult result = step(*batch, micro);
    sums.add(result, batch->labels);
    if (result.last_micro_batch && !result.stepped) ++state_.skipped_steps;
  }
  observers_.after_step(state_.step + 1);
  return sums;
}

StepResult Trainer::step(const data::Batch& batch, int64_t micro) {
  RECORD_USER_SCOPE("ProfilerStep#" + std::to_string(state_.step + 1));
  if (graphed_) return graphed_->run(batch.images, batch.labels);
  return train_step(
      parts_, batch.images, batch.labels,
      step_options(config_).averager(averager_.get()).accumulate_steps(accumulate_steps_), micro);
}

bool Trainer::interval_due() const {
  return steps_in_epoch() % config_.training.log_every_steps == 0 ||
         progress_due_by_time(shown_line_, timing_.process_steps(), timing_.seconds_training(),
                              seconds_since(last_line_));
}

Interval Trainer::read_interval(int64_t epoch, int64_t batches, Clock::time_point interval_start,
                                int64_t interval_images) {
  const double seen = static_cast<double>(state_.seen);
  // Reading the accumulators waits for the queued steps; only then is the rate honest.
  const double running_loss = state_.loss_sum.item<double>() / seen;
  // Alone, a non-finite running loss ends the epoch here (data-parallel ranks read their own
  // losses at their own times: they decide at the epoch's end, on the all-reduced loss).
  if (!group_ && !std::isfinite(running_loss)) diverged_ = true;
  const double running_acc = static_cast<double>(state_.correct.item<int64_t>()) / seen;
  const double rate = interval_images / std::max(seconds_since(interval_start), 1e-9);
  const int64_t left =
      std::min(batches, state_.batch_in_epoch + (total_steps_ - state_.step) * accumulate_steps_) -
      state_.batch_in_epoch;
  // The ETA rests on the steady steps only (warm-up apart, see StepTiming).
  std::optional<double> eta;
  if (const auto steady = timing_.steady_rate()) {
    eta = left * static_cast<double>(config_.training.batch_size) / *steady;
  }
  // The progress line counts optimizer steps (groups of training.accumulate_steps batches).
  return {epoch,
          config_.training.epochs,
          state_.step,
          steps_in_epoch(),
          batches / accumulate_steps_,
          rate,
          running_loss,
          running_acc,
          last_lr_,
          eta};
}

void Trainer::judge_cpu_run_length() {
  if (device_.is_cuda()) return;
  // The evaluations still to come: one at the end of each epoch left (this one included), and
  // one where max_steps ends an epoch part-way.
  const int64_t steps = steps_per_epoch();
  const int64_t steps_left = total_steps_ - state_.step;
  const int64_t evaluations = (steps_in_epoch() + steps_left + steps - 1) / steps;
  const auto warning = long_cpu_run_warning(
      steps_left, config_.training.batch_size * accumulate_steps_, *timing_.steady_rate(),
      evaluations, test_loader_->shard_size(), config_.training.eval_flip);
  if (warning) spdlog::warn("{}", *warning);
}

models::ResNet& Trainer::evaluated_model() {
  parts_.model->eval();
  return parts_.ema ? parts_.ema->average() : parts_.model;
}

FitEnd Trainer::end_diverged(const EpochRecord& r) {
  const bool train = !std::isfinite(r.train_loss);
  // The advice to resume only where a checkpoint was written (the start checkpoint on).
  const bool checkpointed =
      run_ ? std::filesystem::exists(run_->checkpoint_path()) : config_.checkpoint.enabled;
  spdlog::error(
      "training diverged in epoch {} by step {}: the {} loss is {} (lr {:.4g}); stopped. "
      "metrics.jsonl and report.md record the epoch, {}",
      r.epoch, r.step, train ? "training" : "test",
      non_finite_text(train ? r.train_loss : r.test_loss), r.lr,
      checkpointed
          ? fmt::format("the last checkpoint is kept: continue with a lower learning rate, e.g. "
                        "{} --set optimizer.lr={:.4g}",
                        resume_command(), config_.optimizer.lr() / 10)
          : fmt::format("and no checkpoint was written (checkpoint.enabled: false): train a new "
                        "run with a lower learning rate, e.g. --set optimizer.lr={:.4g}",
                        config_.optimizer.lr() / 10));
  return FitEnd::Diverged;
}

bool Trainer::stop_now() {
  if (!group_) return stopping_ = stop_requested();
  if (steps_in_epoch() % config_.training.log_every_steps != 0) return stopping_;
  auto flag = torch::full({}, stop_requested() ? 1.0 : 0.0,
                          torch::TensorOptions(torch::kFloat64).device(device_));
  std::vector<torch::Tensor> any = {flag};
  group_->all_reduce(any, /*max=*/true);
  return stopping_ = flag.item<double>() > 0;
}

}  // namespace training
