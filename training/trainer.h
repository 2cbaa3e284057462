// The training loop: train an epoch, evaluate, record, checkpoint; repeat. Reads like
// pytorch/examples' MNIST loop, with the bookkeeping a study needs around it.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include "data/loader.h"
#include "models/resnet.h"
#include "training/amp.h"
#include "training/checkpoint_io.h"
#include "training/components.h"
#include "training/config.h"
#include "training/epoch_record.h"
#include "training/graphed_step.h"
#include "training/platform/distributed.h"
#include "training/platform/memory.h"
#include "training/platform/memory_snapshot.h"
#include "training/platform/monitor.h"
#include "training/platform/profiler.h"
#include "training/platform/tensorboard.h"
#include "training/progress.h"
#include "training/run_dir.h"
#include "training/schedule.h"

namespace training {

struct Evaluation {
  double loss = 0;      // mean cross-entropy (no label smoothing)
  double accuracy = 0;  // top-1, in [0,1]
  double seconds = 0;
};

// Stopped: a stop signal, checkpoint written. Diverged: a loss stopped being a number (epoch
// record written, no checkpoint of the diverged weights: the last one is kept).
enum class FitEnd { Finished, Stopped, Diverged };

class Trainer {
 public:
  // The first steps each process trains are warm-up (cuDNN's autotuning, first allocations, a
  // graph's warm-up and capture: GraphedStep::kWarmupSteps + 1): timed apart in the epoch
  // records, never averaged into the steady images/s.
  static constexpr int64_t kWarmupSteps = 5;
  // Steady steps the long-CPU-run projection waits for (then judged once).
  static constexpr int64_t kProjectionSteps = 3;

  // Builds the model, loaders, optimizer and schedule, and refuses what cannot run (labels beyond
  // num_classes, a batch larger than the split, a profiler window after the last step) before
  // anything is written. `group` is the data-parallel process group (null when training alone).
  Trainer(const Config& config, torch::Device device, data::Split train, data::Split test,
          ProcessGroup* group = nullptr);

  // Where records, checkpoints, samples and the trace go. Not called on data-parallel ranks other
  // than 0, which write nothing.
  void write_to(RunDirectory& run);

  // Continues from a checkpoint instead of the fresh initialisation (after write_to, whose rows
  // newer than the checkpoint it drops). Refuses a mid-epoch checkpoint written at another
  // training.batch_size: the rest of that epoch would be other samples.
  void resume(const std::filesystem::path& checkpoint);
  FitEnd fit();

  Evaluation evaluate();
  // True while evaluate() runs (an out-of-memory error there needs other remedies).
  bool evaluating() const { return evaluating_; }
  models::ResNet& model() { return parts_.model; }
  const TrainState& state() const { return state_; }
  int64_t steps_per_epoch() const { return train_loader_->batches_per_epoch(); }
  int64_t train_size() const { return train_loader_->dataset_size(); }
  int64_t test_size() const { return test_loader_->dataset_size(); }
  int64_t total_steps() const { return total_steps_; }

 private:
  // Trains epoch state_.epoch + 1 from batch state_.batch_in_epoch; false when it stopped early
  // (max_steps or a stop signal) with the epoch unfinished.
  bool train_epoch();
  // At a log interval: the progress line (the running loss and accuracy read back from the
  // device, then the interval's images/s and the ETA at the steady rate), the TensorBoard
  // progress scalars.
  void log_interval(ProgressLine& progress, int64_t epoch, int64_t batches,
                    std::chrono::steady_clock::time_point interval_start, int64_t interval_images);
  // The epoch's warm-up and steady-state accounting (kWarmupSteps): reset at its start, counted
  // after each step (`images` trained; the projection below once it can be made), and at its end
  // (device synchronised) the training time split into warm-up and steady seconds.
  void begin_epoch_timing(std::chrono::steady_clock::time_point start);
  void count_step(int64_t images);
  void end_epoch_timing(std::chrono::steady_clock::time_point start, double seconds_before);
  // Once per run, on the CPU, after kProjectionSteps steady steps: warns when the rest of the run
  // would take more than an hour at the steady rate (diagnosis.h's long_cpu_run_warning).
  void judge_cpu_run_length();
  EpochRecord record_epoch(int64_t epoch, const Evaluation& evaluation);
  // One evaluation batch into the sums, in chunks of eval_chunk_ images; an out-of-memory error
  // halves the chunk (said once per halving) and redoes it.
  void evaluate_batch(models::ResNet& model, const torch::Tensor& images,
                      const torch::Tensor& labels, torch::Tensor& loss_sum, torch::Tensor& correct);
  void check_evaluation_fits();
  // The model evaluate() runs (the weight average with training.ema_decay), in eval mode.
  models::ResNet& evaluated_model();
  FitEnd end_diverged(const EpochRecord& record);
  // At a stop signal: the checkpoint if one that can be resumed can be written; what was done.
  std::string save_on_stop();
  // Whether a checkpoint of this point could be resumed (not part-way through a torch_data epoch).
  bool resumable_here() const;
  // The epoch's memory columns: each phase's peaks, the largest over the ranks.
  void record_memory(EpochRecord& record);
  // The epoch's line, the evaluation-peak hint (once) and the diagnosis (diagnosis.h).
  void log_epoch(const EpochRecord& record);
  void save();
  // Refuses a profiler.steps window (profiling, memory.snapshot) that starts after the last step.
  void check_profiler_window() const;
  // A stop signal on any rank stops every rank at the same step (checked at log intervals when
  // data-parallel, so steps stay free of extra synchronisation).
  bool stop_now();
  // Sums (maxima) over all ranks, in place (identity when training alone).
  void all_reduce_sum(std::vector<torch::Tensor> tensors);
  void all_reduce_max(std::vector<torch::Tensor> tensors);

  Config config_;
  std::string config_yaml_;
  torch::Device device_;
  RunDirectory* run_;
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
  // Warm-up and steady state (kWarmupSteps): steps this process has trained so far, and this
  // epoch's warm-up steps and seconds, and its steady start, seconds, steps and images.
  int64_t process_steps_ = 0;
  int64_t warmup_steps_ = 0;
  double warmup_seconds_ = 0, steady_seconds_ = 0;
  std::optional<std::chrono::steady_clock::time_point> steady_start_;
  int64_t steady_steps_ = 0, steady_images_ = 0;
  // Progress lines (progress.h's progress_due_by_time): when this process started training, when
  // the last line was shown, whether one was.
  std::optional<std::chrono::steady_clock::time_point> training_start_;
  std::chrono::steady_clock::time_point last_line_;
  bool shown_line_ = false;
  bool stopping_ = false;        // a stop was agreed (see stop_now)
  bool diverged_ = false;        // the running training loss is not a number (one process only)
  bool earlier_events_ = false;  // the run directory holds event files of an earlier session
  bool evaluating_ = false;      // inside evaluate()
  int64_t eval_chunk_ = 0;       // images per evaluation forward pass; 0: the whole batch
  // The device's peaks in this epoch's training phase and in its evaluation: the peak counters
  // are reset at each phase boundary, so each phase's peak is its own (the first step stays in
  // the training peak: it is what must fit).
  MemoryStats train_memory_, eval_memory_;
  bool said_evaluation_peak_ = false;       // the "evaluation sets the peak" hint is logged once
  bool said_cpu_projection_ = false;        // the long-CPU-run projection is judged once
  std::unique_ptr<Sampler> sampler_;        // null when sampling is off or NVML is missing
  std::unique_ptr<StepProfiler> profiler_;  // null unless profiling and writing a run
  std::unique_ptr<StepMemorySnapshot> snapshot_;  // null unless memory.snapshot, writing a run
  std::unique_ptr<EventWriter> events_;           // null unless monitor.tensorboard, writing a run
};

}  // namespace training
