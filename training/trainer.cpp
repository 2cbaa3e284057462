#include "training/trainer.h"

#include <ATen/record_function.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "data/dataset.h"
#include "training/components.h"
#include "training/diagnosis.h"
#include "training/optim.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/stop_signal.h"
#include "training/progress.h"
#include "training/step.h"

namespace training {

namespace F = torch::nn::functional;

namespace {

using Clock = std::chrono::steady_clock;

// The scalars written at each log interval (the epoch's are epoch_record.h's tensorboard_scalars).
constexpr const char* kStepTags[] = {"train/loss", "train/accuracy", "train/lr",
                                     "train/images_per_second"};

bool is_step_tag(const std::string& tag) {
  return std::find(std::begin(kStepTags), std::end(kStepTags), tag) != std::end(kStepTags);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A mid-epoch checkpoint continues its epoch only on the samples it started: the keys that choose
// them (the order, the crops, the data itself) must be as stored. (training.batch_size has its own
// message in resume().)
void check_same_samples(const std::filesystem::path& checkpoint, const TrainState& state,
                        const std::string& current_yaml) {
  const YAML::Node stored = YAML::Load(state.config_yaml);
  const YAML::Node current = YAML::Load(current_yaml);
  for (const auto& [section, key] :
       std::vector<std::pair<std::string, std::string>>{{"training", "seed"},
                                                        {"data", "source"},
                                                        {"data", "root"},
                                                        {"data", "train_limit"},
                                                        {"data", "synthetic_train_size"},
                                                        {"data", "augment"}}) {
    const std::string was = stored[section][key].as<std::string>("");
    const std::string now = current[section][key].as<std::string>("");
    if (was == now) continue;
    throw KeyError(section + "." + key,
                   checkpoint.string() + " stopped " + std::to_string(state.batch_in_epoch) +
                       " batches into epoch " + std::to_string(state.epoch + 1) + " with " + key +
                       " " + was + "; finishing that epoch with " + now +
                       " would train on other samples than the interrupted epoch. Resume with " +
                       section + "." + key + "=" + was + " (change it at an epoch boundary)");
  }
}

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

}  // namespace

Trainer::Trainer(const Config& config, torch::Device device, data::Split train, data::Split test,
                 ProcessGroup* group)
    : config_(config),
      config_yaml_(to_yaml(config)),
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
      total_steps_(
          capped_by_max_steps(config, config.training.epochs * train_loader_->batches_per_epoch())),
      schedule_(config.schedule, config.optimizer.lr(), train_loader_->batches_per_epoch(),
                total_steps_) {
  if (train_loader_->batches_per_epoch() == 0) {
    throw KeyError("training.batch_size",
                   std::to_string(config.training.batch_size) +
                       " is larger than the training set (" +
                       training_set_size(config, train_loader_->dataset_size()));
  }
  check_profiler_window();
}

void Trainer::write_to(RunDirectory& run) {
  run_ = &run;
  sampler_ = make_sampler(config_.monitor, device_, run.path() / "gpu.jsonl");
  if (config_.monitor.tensorboard) {
    // A resumed run writes a new file; fit() starts it with a restart (see start_session).
    earlier_events_ = last_event_step(run.path()) >= 0;
    events_ = std::make_unique<EventWriter>(run.path());
  }
  if (config_.profiler.enabled) {
    profiler_ = std::make_unique<StepProfiler>(profiler_options(config_.profiler),
                                               run.path() / "trace.json", device_);
  }
  if (config_.memory.snapshot) {
    snapshot_ = std::make_unique<StepMemorySnapshot>(
        config_.profiler.steps.at(0), config_.profiler.steps.at(1),
        config_.memory.snapshot_max_entries, run.path() / "memory_snapshot.pickle", device_);
  }
}

void Trainer::check_profiler_window() const {
  const int64_t first = config_.profiler.steps.at(0);
  const bool windowed = config_.profiler.enabled || config_.memory.snapshot;
  if (!windowed || first <= state_.step || first <= total_steps_) return;
  throw KeyError("profiler.steps",
                 "the window starts at step " + std::to_string(first) + ", but this run makes " +
                     std::to_string(total_steps_) +
                     " steps; move the window or lengthen the run (training.epochs, "
                     "training.max_steps)");
}

void Trainer::resume(const std::filesystem::path& checkpoint) {
  bool had_average = false;
  state_ = load_checkpoint(checkpoint, *parts_.model, *parts_.optimizer, device_,
                           parts_.ema ? parts_.ema->average().get() : nullptr, &had_average);
  if (parts_.ema && !had_average) {
    parts_.ema->reset();
    spdlog::info("{} holds no weight average; training.ema_decay starts one from its weights",
                 checkpoint.string());
  }
  if (state_.batch_in_epoch > 0 && config_.data.loader == LoaderKind::TorchData) {
    throw KeyError("data.loader",
                   "torch_data cannot resume " + checkpoint.string() + ", which " + "stopped " +
                       std::to_string(state_.batch_in_epoch) + " batches into epoch " +
                       std::to_string(state_.epoch + 1) +
                       ": its crops and flips are not a function of the batch. Resume it with "
                       "data.loader: batched, or resume torch_data runs at epoch boundaries");
  }
  if (state_.batch_in_epoch > 0 && state_.batch_size != config_.training.batch_size) {
    throw UserError(
        "training.batch_size: " + checkpoint.string() + " stopped " +
        std::to_string(state_.batch_in_epoch) + " batches into epoch " +
        std::to_string(state_.epoch + 1) + " at batch size " + std::to_string(state_.batch_size) +
        "; finishing that epoch at " + std::to_string(config_.training.batch_size) +
        " would train on other samples than the interrupted epoch. Resume with "
        "training.batch_size=" +
        std::to_string(state_.batch_size) +
        " (change it at an epoch boundary: resume with training.epochs set to this epoch first)");
  }
  if (state_.batch_in_epoch > 0) check_same_samples(checkpoint, state_, config_yaml_);
  if (group_ && !group_->is_main() && state_.batch_in_epoch > 0) {
    // The part-way epoch's sums in the checkpoint are every rank's: rank 0 carries them on.
    state_.loss_sum.zero_();
    state_.correct.zero_();
    state_.seen = 0;
  }
  const int64_t ranks = group_ ? group_->world_size() : 1;
  if (state_.world_size != ranks) {
    throw UserError(checkpoint.string() + ": written by a run of " +
                    std::to_string(state_.world_size) + " rank(s), this run has " +
                    std::to_string(ranks) +
                    "; resume with the same number of ranks (the data shards and the batch per "
                    "rank depend on it)");
  }
  // The remaining epochs at this run's batch size (which may differ from the checkpoint's).
  const int64_t steps_per_epoch = train_loader_->batches_per_epoch();
  const int64_t by_epochs = state_.step - state_.batch_in_epoch +
                            (config_.training.epochs - state_.epoch) * steps_per_epoch;
  total_steps_ = capped_by_max_steps(config_, by_epochs);
  schedule_ = LrSchedule(config_.schedule, config_.optimizer.lr(), steps_per_epoch, total_steps_);
  check_profiler_window();
  if (state_.grad_scale.defined() && parts_.scaler.enabled()) {
    parts_.scaler.load_state(state_.grad_scale, state_.growth_tracker);
  }
  if (run_) run_->keep_epochs_through(state_.epoch, state_.step);
  spdlog::info("resumed from {}: {} epochs and {} steps done{}", checkpoint.string(), state_.epoch,
               state_.step,
               state_.batch_in_epoch > 0 ? fmt::format(", {} batches into epoch {}",
                                                       state_.batch_in_epoch, state_.epoch + 1)
                                         : "");
  if (state_.epoch >= config_.training.epochs) {
    spdlog::info(
        "all {} epochs of training.epochs are trained; to train on, raise it (e.g. --set "
        "training.epochs={})",
        config_.training.epochs, config_.training.epochs + 10);
  }
}

FitEnd Trainer::fit() {
  check_evaluation_fits();
  if (events_ && earlier_events_) {
    // A resumed (or restarted) run: TensorBoard drops the dead session's points from this step
    // on, which this one writes again (a redone epoch's, an evaluation killed part-way). At this
    // step itself the points stay, written again here, except a part-trained epoch's
    // evaluation: this run replaces that row of metrics.jsonl (RunDirectory::keep_epochs_through).
    auto kept = scalars_at(events_->path().parent_path(), state_.step);
    if (state_.batch_in_epoch > 0) {
      kept.erase(std::remove_if(kept.begin(), kept.end(),
                              [](const auto& scalar) { return !is_step_tag(scalar.first); }),
               kept.end());
    }
    events_->start_session(state_.step);
    events_->add_scalars(state_.step, kept);
    earlier_events_ = false;
  }
  while (state_.epoch < config_.training.epochs && state_.step < total_steps_) {
    const bool finished = train_epoch();
    if (!finished && stopping_) {
      spdlog::warn("stopped by signal in epoch {} after step {}; {}", state_.epoch + 1, state_.step,
                   save_on_stop());
      return FitEnd::Stopped;
    }
    const int64_t epoch = state_.epoch + 1;
    const Evaluation evaluation = evaluate();
    const EpochRecord record = record_epoch(epoch, evaluation);
    if (diverged(record)) return end_diverged(record);
    if (finished) {
      state_.epoch = epoch;
      state_.batch_in_epoch = 0;
      state_.seen = 0;
      state_.train_seconds = 0;
      state_.skipped_steps = 0;
    }
    save();
  }
  if (profiler_ && profiler_->active()) profiler_->finish_early(state_.step);
  if (snapshot_ && snapshot_->active()) snapshot_->finish_early(state_.step);
  return FitEnd::Finished;
}

std::string Trainer::save_on_stop() {
  const std::string dir = run_ ? run_->path().string() : "<run dir>";
  if (!config_.checkpoint.enabled) {
    return "no checkpoint written (checkpoint.enabled: false): this run cannot be continued; "
           "metrics.jsonl holds its finished epochs";
  }
  if (!resumable_here()) {
    return state_.epoch > 0 ? fmt::format(
                                  "data.loader: torch_data cannot continue an epoch part-way, so "
                                  "the checkpoint of epoch {} is kept: train --resume {} trains "
                                  "epoch {} again",
                                  state_.epoch, dir, state_.epoch + 1)
                            : "data.loader: torch_data cannot continue an epoch part-way and "
                              "epoch 1 had no checkpoint yet: train --resume " +
                                  dir + " starts the run again";
  }
  save();
  return "checkpoint written, continue with: train --resume " + dir;
}

bool Trainer::resumable_here() const {
  // torch_data's crops and flips are not a function of the batch: its epochs cannot be continued
  // part-way.
  return config_.data.loader != LoaderKind::TorchData || state_.batch_in_epoch == 0;
}

FitEnd Trainer::end_diverged(const EpochRecord& r) {
  const bool train = !std::isfinite(r.train_loss);
  spdlog::error(
      "training diverged in epoch {} by step {}: the {} loss is {} (lr {:.4g}); stopped. "
      "metrics.jsonl and report.md record the epoch, the last checkpoint is kept: continue with "
      "a lower learning rate, e.g. train --resume {} --set optimizer.lr={:.4g}",
      r.epoch, r.step, train ? "training" : "test",
      non_finite_text(train ? r.train_loss : r.test_loss), r.lr,
      run_ ? run_->path().string() : "<run dir>", config_.optimizer.lr() / 10);
  return FitEnd::Diverged;
}

bool Trainer::train_epoch() {
  parts_.model->train();
  const int64_t epoch = state_.epoch + 1;
  const int64_t batches = train_loader_->batches_per_epoch();
  if (state_.batch_in_epoch == 0) {
    state_.loss_sum = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device_));
    state_.correct = torch::zeros({}, torch::TensorOptions(torch::kInt64).device(device_));
  }
  train_loader_->start_epoch(epoch, state_.batch_in_epoch);

  ProgressLine progress;
  synchronize(device_);
  reset_peak_memory(device_);
  if (sampler_) sampler_->take_summary();  // the epoch's summary starts now
  const auto start = Clock::now();
  const double seconds_before = state_.train_seconds;
  auto interval_start = start;
  int64_t interval_images = 0;
  data_seconds_ = 0;
  begin_epoch_timing(start);

  while (state_.step < total_steps_ && !diverged_ && !stop_now()) {
    // Host time blocked waiting for the next batch: the input pipeline's share of the epoch.
    const auto wait_start = Clock::now();
    auto batch = train_loader_->next();
    data_seconds_ += seconds_since(wait_start);
    if (!batch) break;
    last_lr_ = schedule_.at(state_.step);
    set_learning_rate(*parts_.optimizer, last_lr_);
    if (sampler_) sampler_->set_position(epoch, state_.step + 1);

    if (group_) group_->broadcast_buffers(*parts_.model);  // as DDP's broadcast_buffers
    if (profiler_) profiler_->before_step(state_.step + 1);
    if (snapshot_) snapshot_->before_step(state_.step + 1);
    StepResult result;
    {
      RECORD_USER_SCOPE("ProfilerStep#" + std::to_string(state_.step + 1));
      if (graphed_) {
        result = graphed_->run(batch->images, batch->labels);
      } else {
        result = train_step(parts_, batch->images, batch->labels,
                            step_options(config_).averager(averager_.get()));
      }
    }
    if (profiler_) profiler_->after_step(state_.step + 1);
    if (snapshot_) snapshot_->after_step(state_.step + 1);
    if (!result.stepped) ++state_.skipped_steps;

    // Accumulated on the device; read back only at log intervals so steps stay asynchronous.
    const int64_t count = batch->labels.size(0);
    torch::NoGradGuard no_grad;
    state_.loss_sum += result.loss.to(torch::kFloat64) * count;
    state_.correct += result.logits.argmax(1).eq(batch->labels).sum();
    state_.seen += count;
    interval_images += count;
    ++state_.step;
    ++state_.batch_in_epoch;
    count_step(count);
    // Every log_every_steps steps, and by time: early in a slow run, and at least every 30 s.
    if (state_.batch_in_epoch % config_.training.log_every_steps == 0 ||
        progress_due_by_time(shown_line_, process_steps_, seconds_since(*training_start_),
                             seconds_since(last_line_))) {
      log_interval(progress, epoch, batches, interval_start, interval_images);
      interval_start = last_line_ = Clock::now();
      interval_images = 0;
      shown_line_ = true;
    }
  }
  synchronize(device_);
  end_epoch_timing(start, seconds_before);
  train_memory_ = memory_stats(device_);
  progress.clear();
  return state_.batch_in_epoch == batches;
}

void Trainer::begin_epoch_timing(Clock::time_point start) {
  warmup_steps_ = 0;
  steady_steps_ = 0;
  steady_images_ = 0;
  // Where this epoch's steady steps start: now, or after the process's last warm-up step.
  steady_start_.reset();
  if (process_steps_ >= kWarmupSteps) steady_start_ = start;
  if (!training_start_) training_start_ = start;
}

void Trainer::count_step(int64_t images) {
  if (++process_steps_ <= kWarmupSteps) {
    ++warmup_steps_;
    if (process_steps_ == kWarmupSteps) {
      synchronize(device_);  // once per process: the warm-up's queued work is done
      steady_start_ = Clock::now();
    }
  } else {
    ++steady_steps_;
    steady_images_ += images;
  }
  if (steady_steps_ == kProjectionSteps) judge_cpu_run_length();
}

void Trainer::end_epoch_timing(Clock::time_point start, double seconds_before) {
  const auto end = Clock::now();
  const auto seconds_between = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  };
  state_.train_seconds = seconds_before + seconds_between(start, end);
  // The warm-up's share ends where the steady steps start; an epoch without a step after the
  // warm-up is warm-up throughout.
  const bool steady = steady_start_ && steady_steps_ > 0;
  steady_seconds_ = steady ? seconds_between(*steady_start_, end) : 0.0;
  warmup_seconds_ = seconds_between(start, steady ? *steady_start_ : end);
}

void Trainer::log_interval(ProgressLine& progress, int64_t epoch, int64_t batches,
                           std::chrono::steady_clock::time_point interval_start,
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
      std::min(batches, state_.batch_in_epoch + total_steps_ - state_.step) - state_.batch_in_epoch;
  // The ETA and the projection rest on the steady steps only (warm-up apart, see kWarmupSteps).
  std::optional<double> steady_rate;
  if (steady_steps_ > 0) {
    steady_rate =
        static_cast<double>(steady_images_) / std::max(seconds_since(*steady_start_), 1e-9);
  }
  std::optional<double> eta;
  if (steady_rate) eta = left * static_cast<double>(config_.training.batch_size) / *steady_rate;
  progress.show({epoch, config_.training.epochs, state_.batch_in_epoch, batches, rate, running_loss,
                 running_acc, last_lr_, eta});

  if (events_) {
    events_->add_scalars(state_.step, {{kStepTags[0], running_loss},
                                       {kStepTags[1], running_acc},
                                       {kStepTags[2], last_lr_},
                                       {kStepTags[3], rate}});
    events_->flush();
  }
}

void Trainer::judge_cpu_run_length() {
  if (device_.is_cuda() || said_cpu_projection_) return;
  said_cpu_projection_ = true;
  const double steady_rate =
      static_cast<double>(steady_images_) / std::max(seconds_since(*steady_start_), 1e-9);
  const auto warning =
      long_cpu_run_warning(total_steps_ - state_.step, config_.training.batch_size, steady_rate);
  if (warning) spdlog::warn("{}", *warning);
}

Evaluation Trainer::evaluate() {
  evaluating_ = true;
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device_.type(), config_.training.precision);
  models::ResNet& model = evaluated_model();
  synchronize(device_);
  reset_peak_memory(device_);  // evaluation's peak is its own
  const auto start = Clock::now();
  auto loss_sum = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device_));
  auto correct = torch::zeros({}, torch::TensorOptions(torch::kInt64).device(device_));
  if (group_) group_->broadcast_buffers(*model);  // every rank evaluates with rank 0's statistics
  test_loader_->start_epoch(0);
  while (auto batch = test_loader_->next()) {
    evaluate_batch(model, batch->images, batch->labels, loss_sum, correct);
  }
  auto count = torch::full({}, static_cast<double>(test_loader_->shard_size()),
                           torch::TensorOptions(torch::kFloat64).device(device_));
  all_reduce_sum({loss_sum, correct, count});  // each rank evaluated its shard of the test set
  const double n = count.item<double>();
  Evaluation evaluation{loss_sum.item<double>() / n, correct.item<int64_t>() / n, 0.0};
  evaluation.seconds = seconds_since(start);
  eval_memory_ = memory_stats(device_);
  evaluating_ = false;
  return evaluation;
}

models::ResNet& Trainer::evaluated_model() {
  parts_.model->eval();
  // With training.ema_decay, the weight average is the model evaluated.
  return parts_.ema ? parts_.ema->average() : parts_.model;
}

void Trainer::evaluate_batch(models::ResNet& model, const torch::Tensor& images,
                             const torch::Tensor& labels, torch::Tensor& loss_sum,
                             torch::Tensor& correct) {
  const int64_t n = labels.size(0);
  for (int64_t begin = 0; begin < n;) {
    const int64_t size = std::min(eval_chunk_ > 0 ? eval_chunk_ : n, n - begin);
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
      if (!is_out_of_memory(e) || size == 1) throw;
      eval_chunk_ = size / 2;
      spdlog::warn(
          "memory: evaluation ran out of memory at {} images per forward pass; it goes on in "
          "chunks of {} (training.eval_batch_size {}; the results do not depend on it)",
          size, eval_chunk_, config_.training.eval_batch_size);
    }
  }
}

void Trainer::check_evaluation_fits() {
  // One evaluation batch (the first of the test split), before the first step: what does not fit
  // is split now, not after an epoch of training. Its peak is not the epoch's (reset after).
  // Where memory is bounded only: on a CPU without memory.limit there is nothing to fit into.
  if (!device_.is_cuda() && config_.memory.limit == 0) return;
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(device_.type(), config_.training.precision);
  models::ResNet& model = evaluated_model();
  test_loader_->start_epoch(0);
  if (auto batch = test_loader_->next()) {
    auto loss_sum = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device_));
    auto correct = torch::zeros({}, torch::TensorOptions(torch::kInt64).device(device_));
    evaluating_ = true;
    evaluate_batch(model, batch->images, batch->labels, loss_sum, correct);
    evaluating_ = false;
  }
  test_loader_->start_epoch(0);  // no batch left half-taken
  parts_.model->train();
}

EpochRecord Trainer::record_epoch(int64_t epoch, const Evaluation& evaluation) {
  EpochRecord r;
  r.epoch = epoch;
  r.step = state_.step;
  r.lr = last_lr_;
  // Over all ranks: sums of loss, hits and samples; the slowest rank's time.
  const auto on_device = torch::TensorOptions(torch::kFloat64).device(device_);
  auto loss_sum = state_.loss_sum.clone(), correct = state_.correct.clone();
  auto seen_total = torch::full({}, static_cast<double>(state_.seen), on_device);
  auto seconds = torch::full({}, state_.train_seconds, on_device);
  auto steady_images = torch::full({}, static_cast<double>(steady_images_), on_device);
  auto steady_seconds = torch::full({}, steady_seconds_, on_device);
  all_reduce_sum({loss_sum, correct, seen_total, steady_images});
  all_reduce_max({seconds, steady_seconds});
  const double seen = std::max(seen_total.item<double>(), 1.0);
  r.epoch_seconds = seconds.item<double>();
  r.warmup_steps = warmup_steps_;
  r.warmup_seconds = warmup_seconds_;
  if (steady_images_ > 0 && steady_seconds.item<double>() > 0) {
    r.steady_images_per_second = steady_images.item<double>() / steady_seconds.item<double>();
  }
  r.batches = state_.batch_in_epoch;
  r.epoch_batches = train_loader_->batches_per_epoch();
  r.train_loss = loss_sum.item<double>() / seen;
  r.train_acc = static_cast<double>(correct.item<int64_t>()) / seen;
  r.images_per_second = seen / std::max(r.epoch_seconds, 1e-9);
  r.test_loss = evaluation.loss;
  r.test_acc = evaluation.accuracy;
  r.eval_seconds = evaluation.seconds;
  record_memory(r);
  r.skipped_steps = state_.skipped_steps;
  if (parts_.scaler.enabled()) r.grad_scale = parts_.scaler.current_scale();
  // Where the training time went. The epoch's wall time is device-synchronised at both ends; the
  // wait for data is host time blocked in the loader, the rest is forward/backward/step.
  r.data_seconds = std::min(data_seconds_, state_.train_seconds);
  r.compute_seconds = state_.train_seconds - r.data_seconds;
  r.data_wait_fraction = state_.train_seconds > 0 ? r.data_seconds / state_.train_seconds : 0.0;
  if (sampler_) {
    sampler_->sample_now();
    const SamplerSummary samples = sampler_->take_summary();
    r.utilization_mean = samples.utilization_mean;
    r.utilization_max = samples.utilization_max;
    r.memory_used_max_bytes = samples.memory_used_max;
  }
  r.world_size = group_ ? group_->world_size() : 1;
  if (run_) {
    run_->record_epoch(r);
    for (const auto& c : accuracy_crossings(run_->epochs(), config_.training.accuracy_thresholds)) {
      if (c.epoch != r.epoch) continue;  // logged when it happened
      spdlog::info(
          "time to accuracy: {:g}% test accuracy first reached in epoch {} (step {}), "
          "after {} of training and evaluation",
          100 * c.threshold, c.epoch, c.step, format_duration(c.seconds));
    }
  }
  if (events_) {
    events_->add_scalars(r.step, tensorboard_scalars(r));
    events_->flush();
  }
  log_epoch(r);
  return r;
}

void Trainer::record_memory(EpochRecord& r) {
  // Each phase's peaks (the largest over the ranks); the overall columns are the larger of the
  // two. Reserved bytes exist on CUDA only (on the CPU the tracking allocator holds nothing back).
  auto peaks = torch::tensor({static_cast<double>(train_memory_.peak_allocated),
                              static_cast<double>(train_memory_.peak_reserved),
                              static_cast<double>(eval_memory_.peak_allocated),
                              static_cast<double>(eval_memory_.peak_reserved)},
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

void Trainer::log_epoch(const EpochRecord& r) {
  spdlog::info(
      "epoch {}/{}  step {}  train loss {:.4f} acc {:.2f}%  test loss {:.4f} acc {:.2f}%  "
      "lr {:.4g}  {:.1f} s  {:.0f} img/s  peak {:.1f} MiB training, {:.1f} MiB evaluation "
      "(allocated{})",
      r.epoch, config_.training.epochs, r.step, r.train_loss, 100 * r.train_acc, r.test_loss,
      100 * r.test_acc, r.lr, r.epoch_seconds, r.images_per_second,
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

void Trainer::save() {
  // The last checkpoint is kept rather than replaced by one that cannot be resumed.
  if (!config_.checkpoint.enabled || !resumable_here()) return;
  // A part-way epoch's sums are every rank's: the checkpoint holds them all (each rank calls
  // save() at the same step), and a resume gives them to rank 0 alone (resume()).
  TrainState saved = state_;
  if (group_ && state_.batch_in_epoch > 0) {
    saved.loss_sum = state_.loss_sum.clone();
    saved.correct = state_.correct.clone();
    auto seen = torch::full({}, state_.seen, torch::TensorOptions(torch::kInt64).device(device_));
    all_reduce_sum({saved.loss_sum, saved.correct, seen});
    saved.seen = seen.item<int64_t>();
  }
  if (!run_) return;  // only rank 0 writes
  saved.world_size = group_ ? group_->world_size() : 1;
  saved.batch_size = config_.training.batch_size;
  if (parts_.scaler.enabled()) {
    saved.grad_scale = parts_.scaler.scale_state();
    saved.growth_tracker = parts_.scaler.growth_tracker_state();
  }
  save_checkpoint(run_->checkpoint_path(), *parts_.model, *parts_.optimizer, saved, config_yaml_,
                  parts_.ema ? parts_.ema->average().get() : nullptr);
}

bool Trainer::stop_now() {
  if (!group_) return stopping_ = stop_requested();
  if (state_.batch_in_epoch % config_.training.log_every_steps != 0) return stopping_;
  auto flag = torch::full({}, stop_requested() ? 1.0 : 0.0,
                          torch::TensorOptions(torch::kFloat64).device(device_));
  std::vector<torch::Tensor> any = {flag};
  group_->all_reduce(any, /*max=*/true);
  return stopping_ = flag.item<double>() > 0;
}

void Trainer::all_reduce_sum(std::vector<torch::Tensor> tensors) {
  if (group_) group_->all_reduce(tensors);
}

void Trainer::all_reduce_max(std::vector<torch::Tensor> tensors) {
  if (group_) group_->all_reduce(tensors, /*max=*/true);
}

}  // namespace training
