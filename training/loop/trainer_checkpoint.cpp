// The Trainer's checkpoints: what a resume checks and restores, what a save writes (every rank's
// part-way sums), and what a stop signal leaves behind (trainer.h).
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "training/loop/trainer.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"

namespace training {

namespace {

// A mid-epoch checkpoint continues its epoch only on the samples it started: the keys that choose
// them (the order, the crops, the data itself) must be as stored.
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
                                                        {"data", "augment"},
                                                        {"data", "image_size"}}) {
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

// A mid-epoch checkpoint stopped at a group boundary of its own training.accumulate_steps; another
// grouping would cut the rest of the epoch into other optimizer steps.
void check_same_grouping(const std::filesystem::path& checkpoint, const TrainState& state,
                         int64_t accumulate_steps) {
  const int64_t was = YAML::Load(state.config_yaml)["training"]["accumulate_steps"].as<int64_t>();
  if (was == accumulate_steps) return;
  throw KeyError("training.accumulate_steps",
                 checkpoint.string() + " stopped " + std::to_string(state.batch_in_epoch) +
                     " batches into epoch " + std::to_string(state.epoch + 1) + " with " +
                     std::to_string(was) + " micro-batches per step; finishing that epoch with " +
                     std::to_string(accumulate_steps) +
                     " would group its batches into other optimizer steps. Resume with "
                     "training.accumulate_steps=" +
                     std::to_string(was) + " (change it at an epoch boundary)");
}

}  // namespace

void Trainer::check_resumable(const std::filesystem::path& checkpoint, const TrainState& state,
                              const Config& config, const std::string& run_yaml, int64_t ranks) {
  if (state.world_size != ranks) {
    throw UserError(checkpoint.string() + ": written by a run of " +
                    std::to_string(state.world_size) + " rank(s), this run has " +
                    std::to_string(ranks) +
                    "; resume with the same number of ranks (the data shards and the batch per "
                    "rank depend on it)");
  }
  if (state.batch_in_epoch == 0) return;
  if (config.data.loader == LoaderKind::TorchData) {
    throw KeyError("data.loader",
                   "torch_data cannot resume " + checkpoint.string() + ", which " + "stopped " +
                       std::to_string(state.batch_in_epoch) + " batches into epoch " +
                       std::to_string(state.epoch + 1) +
                       ": its crops and flips are not a function of the batch. Resume it with "
                       "data.loader: batched, or resume torch_data runs at epoch boundaries");
  }
  if (state.batch_size != config.training.batch_size) {
    throw KeyError(
        "training.batch_size",
        checkpoint.string() + " stopped " + std::to_string(state.batch_in_epoch) +
            " batches into epoch " + std::to_string(state.epoch + 1) + " at batch size " +
            std::to_string(state.batch_size) + "; finishing that epoch at " +
            std::to_string(config.training.batch_size) +
            " would train on other samples than the interrupted epoch. Resume with "
            "training.batch_size=" +
            std::to_string(state.batch_size) +
            " (change it at an epoch boundary: resume with training.epochs set to this epoch "
            "first)");
  }
  check_same_samples(checkpoint, state, run_yaml);
  check_same_grouping(checkpoint, state, config.training.accumulate_steps);
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
  check_resumable(checkpoint, state_, config_, inputs_.config_yaml,
                  group_ ? group_->world_size() : 1);
  if (group_ && state_.batch_in_epoch > 0) take_own_sums();
  // The remaining epochs at this run's batch size (which may differ from the checkpoint's).
  total_steps_ = planned_steps(config_, steps_per_epoch(), &state_);
  schedule_ = LrSchedule(config_.schedule, config_.optimizer.lr(), steps_per_epoch(), total_steps_);
  check_profiler_window(config_, state_.step, total_steps_);
  if (state_.grad_scale.defined() && parts_.scaler.enabled()) {
    parts_.scaler.load_state(state_.grad_scale, state_.growth_tracker);
  }
  if (run_) run_->keep_epochs_through(state_.epoch, state_.step);
  // The start-up line left the steps planned to this line: they count those already done.
  spdlog::info("resumed from {}: {} epochs and {} steps done{}; {} steps planned in all",
               checkpoint.string(), state_.epoch, state_.step,
               state_.batch_in_epoch > 0 ? fmt::format(", {} batches into epoch {}",
                                                       state_.batch_in_epoch, state_.epoch + 1)
                                         : "",
               total_steps_);
  const bool capped = config_.training.max_steps > 0 && state_.step >= config_.training.max_steps;
  if (state_.epoch >= config_.training.epochs && capped) {  // both: the advice raises both
    spdlog::info(
        "all {} epochs of training.epochs are trained and training.max_steps {} is reached ({} "
        "steps done); to train on, raise both (e.g. --set training.epochs={} --set "
        "training.max_steps=0)",
        config_.training.epochs, config_.training.max_steps, state_.step,
        config_.training.epochs + 10);
  } else if (state_.epoch >= config_.training.epochs) {
    spdlog::info(
        "all {} epochs of training.epochs are trained; to train on, raise it (e.g. --set "
        "training.epochs={})",
        config_.training.epochs, config_.training.epochs + 10);
  } else if (state_.step >= total_steps_) {
    spdlog::info(
        "training.max_steps {} is reached ({} steps done); to train on, raise it or set it to 0 "
        "(no cap)",
        config_.training.max_steps, state_.step);
  }
}

void Trainer::take_own_sums() {
  const int64_t rank = group_->rank();
  if (state_.rank_loss_sums.defined() && state_.rank_loss_sums.numel() == group_->world_size()) {
    // Each rank carries on its own part-way sums: its running loss (the progress line,
    // TensorBoard) is the uninterrupted run's, and the epoch's record adds them up as before.
    state_.loss_sum = state_.rank_loss_sums.select(0, rank).clone();
    state_.correct = state_.rank_correct.select(0, rank).clone();
    state_.seen = state_.rank_seen.select(0, rank).item<int64_t>();
    // Released: the uninterrupted run holds no such tensors (its memory peaks are compared).
    state_.rank_loss_sums.reset();
    state_.rank_correct.reset();
    state_.rank_seen.reset();
    return;
  }
  // A checkpoint with the totals only: rank 0 carries them on.
  if (group_->is_main()) return;
  state_.loss_sum.zero_();
  state_.correct.zero_();
  state_.seen = 0;
}

void Trainer::check_profiler_window(const Config& config, int64_t done, int64_t total) {
  const int64_t first = config.profiler.steps.at(0);
  const bool windowed = config.profiler.enabled || config.memory.snapshot;
  if (!windowed || first <= done || first <= total) return;
  throw KeyError("profiler.steps",
                 "the window starts at step " + std::to_string(first) + ", but this run makes " +
                     std::to_string(total) +
                     " steps; move the window or lengthen the run (training.epochs, "
                     "training.max_steps)");
}

std::string Trainer::save_on_stop() {
  const std::string resume = resume_command();
  if (!config_.checkpoint.enabled) {
    return "no checkpoint written (checkpoint.enabled: false): this run cannot be continued; "
           "metrics.jsonl holds its finished epochs";
  }
  if (!resumable_here()) {
    return state_.epoch > 0 ? fmt::format(
                                  "data.loader: torch_data cannot continue an epoch part-way, so "
                                  "the checkpoint of epoch {} is kept: {} trains epoch {} again",
                                  state_.epoch, resume, state_.epoch + 1)
                            : "data.loader: torch_data cannot continue an epoch part-way and "
                              "epoch 1 had no checkpoint yet: " +
                                  resume + " starts the run again";
  }
  save();
  return "checkpoint written, continue with: " + resume;
}

bool Trainer::resumable_here() const {
  // torch_data's crops and flips are no function of the batch: its epochs cannot resume part-way.
  return config_.data.loader != LoaderKind::TorchData || state_.batch_in_epoch == 0;
}

void Trainer::save() {
  // The last checkpoint is kept rather than replaced by one that cannot be resumed.
  if (!config_.checkpoint.enabled || !resumable_here()) return;
  // A part-way epoch's sums are every rank's: the checkpoint holds each rank's and their totals
  // (each rank calls save() at the same step), and a resume gives each rank its own (resume()).
  TrainState saved = state_;
  // The part-way epoch's training peaks (the largest rank's), for the epoch's row after a resume.
  if (state_.batch_in_epoch > 0) {
    auto peaks = torch::tensor({train_memory_.peak_allocated, train_memory_.peak_reserved},
                               torch::TensorOptions(torch::kInt64).device(device_));
    all_reduce_max({peaks});
    saved.peak_allocated = peaks[0].item<int64_t>();
    saved.peak_reserved = peaks[1].item<int64_t>();
  }
  if (group_ && state_.batch_in_epoch > 0) {
    const int64_t world = group_->world_size(), rank = group_->rank();
    const auto on_device = torch::TensorOptions().device(device_);
    auto loss = torch::zeros({world}, on_device.dtype(torch::kFloat64));
    auto correct = torch::zeros({world}, on_device.dtype(torch::kInt64));
    auto seen = torch::zeros({world}, on_device.dtype(torch::kInt64));
    loss.select(0, rank).copy_(state_.loss_sum);
    correct.select(0, rank).copy_(state_.correct);
    seen.select(0, rank).fill_(state_.seen);
    all_reduce_sum({loss, correct, seen});
    saved.rank_loss_sums = loss;
    saved.rank_correct = correct;
    saved.rank_seen = seen;
    saved.loss_sum = loss.sum();
    saved.correct = correct.sum();
    saved.seen = seen.sum().item<int64_t>();
  }
  // The other ranks wait for rank 0's write: a stop ends with every rank's state written (a rank
  // that left early would be taken for a failure and its peers stopped mid-write).
  if (!run_) return wait_for_rank_0();
  const DeferRepeatedStops defer;  // a repeated stop signal waits for the checkpoint
  saved.world_size = group_ ? group_->world_size() : 1;
  saved.batch_size = config_.training.batch_size;
  if (parts_.scaler.enabled()) {
    saved.grad_scale = parts_.scaler.scale_state();
    saved.growth_tracker = parts_.scaler.growth_tracker_state();
  }
  write_pending_inputs();
  save_checkpoint(run_->checkpoint_path(), *parts_.model, *parts_.optimizer, saved, inputs_,
                  parts_.ema ? parts_.ema->average().get() : nullptr);
  wait_for_rank_0();
}

void Trainer::write_pending_inputs() {
  if (!inputs_pending_ || !run_) return;
  run_->write_inputs(inputs_);
  inputs_pending_ = false;
}

void Trainer::wait_for_rank_0() {
  if (!group_) return;
  all_reduce_sum({torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device_))});
}

}  // namespace training
