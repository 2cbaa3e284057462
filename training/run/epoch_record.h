// One epoch's measurements, a row of metrics.jsonl and metrics.csv, columns in member order; a
// column is added here (and to_json / epoch_record_from_json).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "training/platform/tensorboard.h"

namespace training {

struct EpochRecord {
  int64_t epoch = 0;
  int64_t step = 0;                      // optimizer steps so far
  double lr = 0;                         // of the epoch's last step
  double train_loss = 0, train_acc = 0;  // running mean over the epoch's (augmented) batches
  double test_loss = 0, test_acc = 0;    // the whole test split, eval mode
  double epoch_seconds = 0;              // training phase, device-synchronised at both ends
  double eval_seconds = 0;
  double images_per_second = 0;  // training images / epoch_seconds
  std::string device;
  // Device memory peaks: each phase's own (the counters are reset at the phase boundary) and the
  // larger of the two. Reserved bytes exist on CUDA only.
  int64_t peak_allocated_bytes = 0;
  std::optional<int64_t> peak_reserved_bytes;
  int64_t train_peak_allocated_bytes = 0;
  std::optional<int64_t> train_peak_reserved_bytes;
  int64_t eval_peak_allocated_bytes = 0;
  std::optional<int64_t> eval_peak_reserved_bytes;
  int64_t skipped_steps = 0;         // fp16 steps skipped for inf/NaN gradients
  std::optional<double> grad_scale;  // fp16 only
  double data_seconds = 0;           // host time blocked waiting for the next batch
  double compute_seconds = 0;        // the rest of epoch_seconds
  double data_wait_fraction = 0;
  std::optional<double> utilization_mean, utilization_max;  // the sampler's (GPU or CPU)
  std::optional<int64_t> memory_used_max_bytes;             // NVML used memory, or RSS
  int64_t world_size = 1;
  // Steady-state speed: the first Trainer::kWarmupSteps steps a process trains are timed apart
  // and never averaged into the steady rate (loop/step_timing.h).
  int64_t warmup_steps = 0;                        // steps of this epoch that were warm-up
  double warmup_seconds = 0;                       // their wall time (part of epoch_seconds)
  std::optional<double> steady_images_per_second;  // after the warm-up; null without such steps
  int64_t batches = 0;        // batches (micro-batches) trained in this epoch (0: not recorded)
  int64_t epoch_batches = 0;  // batches in a whole epoch (0: not recorded)
  // Gradient accumulation: micro-batches per optimizer step, and the images per optimizer step
  // (batch_size x accumulate_steps x world_size; 0: not recorded).
  int64_t accumulate_steps = 1;
  int64_t effective_batch_size = 0;
};

// A whole epoch's time: its epoch_seconds, or an early-stopped one's plus its missing batches at
// the steady rate (projected, from its steady steps); null without a steady step.
struct EpochTime {
  double seconds = 0;
  bool projected = false;
  int64_t steady_steps = 0;  // the steps the projection rests on
};
std::optional<EpochTime> epoch_time(const EpochRecord& record);

// A run diverged when its training or test loss stopped being a number (NaN or infinite), written
// as null in JSON and read back as NaN.
bool diverged(const EpochRecord& record);
// The first diverged epoch's record, if any.
const EpochRecord* first_diverged(const std::vector<EpochRecord>& records);
// "NaN", "inf" or "-inf" for a value that is not a number.
std::string non_finite_text(double value);
// "diverged in epoch 3 (step 1200): the training loss is NaN", for a diverged record.
std::string divergence_text(const EpochRecord& record);

nlohmann::ordered_json to_json(const EpochRecord& record);

// The record as TensorBoard scalars: train/ (running loss and accuracy, lr), test/, time/, memory/
// (bytes), device/ (the sampler's); absent optional columns give none.
Scalars tensorboard_scalars(const EpochRecord& record);

// When the test accuracy first reached `threshold`: the epoch, its last step, and the training and
// evaluation seconds of the run up to the end of that epoch (time to accuracy).
struct AccuracyCrossing {
  double threshold = 0;
  int64_t epoch = 0, step = 0;
  double seconds = 0;
};
// Each threshold's first crossing in `records` (epoch order); those never reached left out.
std::vector<AccuracyCrossing> accuracy_crossings(const std::vector<EpochRecord>& records,
                                                 const std::vector<double>& thresholds);

// Reads a row back; UserError naming `where` (file, line) and the missing or mistyped column.
EpochRecord epoch_record_from_json(const nlohmann::json& row, const std::string& where);

}  // namespace training
