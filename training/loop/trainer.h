// The training loop: for each epoch, for each batch, a step; then evaluate, record, save. It reads
// like pytorch/examples' MNIST loop: what watches it (progress lines, TensorBoard, the profiler,
// the snapshot, the sampler) are observers (observer.h), the warm-up/steady clock is StepTiming,
// the evaluation with its out-of-memory halving is the Evaluator.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "data/loader.h"
#include "models/resnet.h"
#include "training/config/config.h"
#include "training/loop/evaluator.h"
#include "training/loop/observer.h"
#include "training/loop/step_timing.h"
#include "training/parts/components.h"
#include "training/platform/distributed.h"
#include "training/platform/memory.h"
#include "training/run/checkpoint_io.h"
#include "training/run/epoch_record.h"
#include "training/run/run_dir.h"
#include "training/step/graphed_step.h"
#include "training/step/schedule.h"

namespace training {

// Stopped: a stop signal, checkpoint written. Diverged: a loss stopped being a number (epoch
// record written, no checkpoint of the diverged weights: the last one is kept).
enum class FitEnd { Finished, Stopped, Diverged };

class Trainer {
 public:
  static constexpr int64_t kWarmupSteps = StepTiming::kWarmupSteps;

  // Builds the model, loaders, optimizer and schedule, and refuses what cannot run (labels beyond
  // num_classes, a batch larger than the split, a profiler window after the last step) before
  // anything is written. `group` is the data-parallel process group (null when training alone).
  Trainer(const Config& config, torch::Device device, data::Split train, data::Split test,
          ProcessGroup* group = nullptr);
  // Its evaluator and observers hold references to its config: it stays where it was made.
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // What the constructor refuses that needs no parts, from the training set's size alone, so that
  // a command says it before deciding, measuring or building anything: a batch larger than the
  // (per-rank) training set, an epoch with no whole step of training.accumulate_steps, a profiler
  // window after the run's last step (a resumed run's: from `resumed`, its checkpoint's
  // position). KeyError naming the key.
  static void check_steps(const Config& config, int64_t train_size, int64_t world_size,
                          const TrainState* resumed = nullptr);
  // The optimizer steps a run plans in all: a fresh run's epochs of `steps_per_epoch`; a resumed
  // one's steps before its checkpoint's epoch and the epochs left at this config's batch; either
  // capped by training.max_steps.
  static int64_t planned_steps(const Config& config, int64_t steps_per_epoch,
                               const TrainState* resumed);
  // What a resume of `checkpoint` (standing at `state`: check_checkpoint_model's) refuses that
  // needs no parts, so that a command says it before deciding or measuring anything: another number
  // of ranks; part-way through an epoch, another training.batch_size, training.accumulate_steps, a
  // key that chooses the samples (against `run_yaml`, the run's config as asked), or the torch_data
  // loader. KeyError naming the key (UserError for the ranks).
  static void check_resumable(const std::filesystem::path& checkpoint, const TrainState& state,
                              const Config& config, const std::string& run_yaml, int64_t ranks);

  // Where records, checkpoints, samples and the trace go. Not called on data-parallel ranks other
  // than 0, which write nothing.
  void write_to(RunDirectory& run);
  // On a data-parallel rank other than 0: rank 0's run directory where this rank knows it (a
  // resume's, or --output-dir), for the commands it advises.
  void name_run(std::filesystem::path path) { run_path_ = std::move(path); }
  // Whether this run's checkpoint exists (rank 0; a resume's, or one saved since the start).
  bool checkpoint_exists() const {
    return run_ && std::filesystem::exists(run_->checkpoint_path());
  }
  // Whether the run's folder, seen from this host (rank 0's, or the one name_run gave), is there
  // without a checkpoint: rank 0 ended before its first (a full disk), and nothing resumes.
  bool checkpoint_missing() const {
    const std::filesystem::path dir = run_ ? run_->path() : run_path_;
    return !dir.empty() && std::filesystem::is_directory(dir) &&
           !std::filesystem::exists(dir / "checkpoint.pt");
  }
  // The run's inputs its checkpoints store (default: the config it was built from, no decisions);
  // `with_checkpoint`: also config.yaml and decisions.json, before its first row or checkpoint.
  void record_inputs(RunInputs inputs, bool with_checkpoint = false) {
    inputs_ = std::move(inputs);
    inputs_pending_ = with_checkpoint;
  }

  // Continues from a checkpoint instead of the fresh initialisation (after write_to, whose rows
  // newer than the checkpoint it drops). Refuses a mid-epoch checkpoint written at another
  // training.batch_size: the rest of that epoch would be other samples (trainer_checkpoint.cpp).
  void resume(const std::filesystem::path& checkpoint);
  FitEnd fit();
  // What the evaluation holds from training's first update on and the run does not yet (with
  // momentum a momentum buffer per parameter; a graph-captured step's gradients): the evaluation
  // probe before the first step runs beside them.
  std::vector<torch::Tensor> held_from_the_first_update() const;

  // The evaluation, after an epoch's last optimizer step: its gradients are freed first (the next
  // step's first micro-batch frees them anyway), but those keeps_gradients() keeps.
  Evaluation evaluate();
  // Whether the step's gradients stay between steps: a graph-captured step replays into them (an
  // eager fallback frees them as every eager step does).
  bool keeps_gradients() const { return graphed_ && !graphed_->fell_back_to_eager(); }
  // True while evaluate() runs (an out-of-memory error there needs other remedies).
  bool evaluating() const { return evaluator_.evaluating(); }
  bool evaluating_one_image() const { return evaluator_.at_one_image(); }
  models::ResNet& model() { return parts_.model; }
  const TrainState& state() const { return state_; }
  // Optimizer steps per epoch: whole groups of training.accumulate_steps batches.
  int64_t steps_per_epoch() const { return train_loader_->batches_per_epoch() / accumulate_steps_; }
  // The batches an epoch trains (an incomplete last group is dropped, as a partial batch is).
  int64_t batches_per_epoch() const { return steps_per_epoch() * accumulate_steps_; }
  int64_t train_size() const { return train_loader_->dataset_size(); }
  int64_t test_size() const { return test_loader_->dataset_size(); }
  int64_t total_steps() const { return total_steps_; }
  int64_t world_size() const { return group_ ? group_->world_size() : 1; }

 private:
  // Trains epoch state_.epoch + 1 from batch state_.batch_in_epoch; false when it stopped early
  // (max_steps or a stop signal) with the epoch unfinished.
  bool train_epoch();
  // Trains one optimizer step of training.accumulate_steps micro-batches; its sums (device
  // tensors), or none when the data ended or a stop came between two micro-batches (training
  // alone: the group restarts on resume, its BatchNorm statistics put back).
  std::optional<StepSums> train_group(int64_t epoch);
  StepResult step(const data::Batch& batch, int64_t micro);
  // Optimizer steps trained in the current epoch.
  int64_t steps_in_epoch() const { return state_.batch_in_epoch / accumulate_steps_; }
  // Whether a progress line is due after this step: every log_every_steps steps, and by time
  // (early in a slow run, then at least every 30 s: progress.h).
  bool interval_due() const;
  // At a log interval: the running loss and accuracy read back from the device (a non-finite
  // loss ends the epoch when training alone), the interval's images/s and the ETA.
  Interval read_interval(int64_t epoch, int64_t batches,
                         std::chrono::steady_clock::time_point interval_start,
                         int64_t interval_images);
  // Once per run, on the CPU, after StepTiming::kProjectionSteps steady steps: warns when the
  // rest of the run, its evaluations included, would take more than an hour.
  void judge_cpu_run_length();
  // The epoch's record (over all ranks), written to the run and told to the observers.
  EpochRecord record_epoch(int64_t epoch, const Evaluation& evaluation);
  // The epoch's memory columns: each phase's peaks, the largest over the ranks.
  void record_memory(EpochRecord& record, const MemoryStats& evaluation);
  // The model evaluate() runs (the weight average with training.ema_decay), in eval mode.
  models::ResNet& evaluated_model();
  FitEnd end_diverged(const EpochRecord& record);
  // At a stop signal: the checkpoint if one that can be resumed can be written; what was done.
  std::string save_on_stop();
  // Whether a checkpoint of this point could be resumed (not part-way through a torch_data epoch).
  bool resumable_here() const;
  void save();
  void write_pending_inputs();  // record_inputs' with_checkpoint
  // Resuming part-way through an epoch, data-parallel: this rank's own sums from the checkpoint.
  void take_own_sums();
  // Data-parallel: returns once every rank got here (rank 0 after its checkpoint write).
  void wait_for_rank_0();
  // Refuses a profiler.steps window (profiling, memory.snapshot) that starts after the last of
  // `total` steps, `done` of them done.
  static void check_profiler_window(const Config& config, int64_t done, int64_t total);
  // A stop signal on any rank stops every rank at the same step (checked at log intervals when
  // data-parallel, so steps stay free of extra synchronisation).
  bool stop_now();
  // Sums (maxima) over all ranks, in place (identity when training alone).
  void all_reduce_sum(std::vector<torch::Tensor> tensors) {
    if (group_) group_->all_reduce(tensors);
  }
  void all_reduce_max(std::vector<torch::Tensor> tensors) {
    if (group_) group_->all_reduce(tensors, /*max=*/true);
  }

  Config config_;
  RunInputs inputs_;
  bool inputs_pending_ = false;  // config.yaml and decisions.json wait for the next checkpoint
  int64_t accumulate_steps_;     // training.accumulate_steps
  torch::Device device_;
  RunDirectory* run_;
  std::filesystem::path run_path_;  // name_run's (rank > 0); empty: rank 0's log names it

  // "PROGRAM --resume DIR" (advised_program, the directory as one shell word); on a rank that
  // does not know it, what names it.
  std::string resume_command() const;
  ProcessGroup* group_;
  StepParts parts_;  // model, optimizer, loss scaler
  std::unique_ptr<data::Loader> train_loader_;
  std::unique_ptr<data::Loader> test_loader_;
  std::unique_ptr<ProcessGroup::GradientAverager> averager_;
  std::unique_ptr<GraphedStep> graphed_;  // null unless training.cuda_graph puts the step in one
  int64_t total_steps_;
  LrSchedule schedule_;
  TrainState state_;
  double last_lr_ = 0;
  double data_seconds_ = 0;  // this epoch's time waiting for the next batch
  StepTiming timing_;
  Evaluator evaluator_;
  Observers observers_;
  bool shown_line_ = false;  // a progress line was shown in this process
  std::chrono::steady_clock::time_point last_line_;
  bool stopping_ = false;  // a stop was agreed (see stop_now)
  bool diverged_ = false;  // the running training loss is not a number (one process only)
  // The device's peaks in this epoch's training phase, its own (the counters are reset at each
  // phase boundary); the first step stays in it: it is what must fit.
  MemoryStats train_memory_;
};

}  // namespace training
