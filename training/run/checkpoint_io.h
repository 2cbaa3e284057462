// Checkpoints: model, optimizer, position, partial-epoch accumulators, RNG state and config in one
// torch archive written atomically; continuing from one gives the metrics of never having stopped.
// On disk the archive is framed with a checksum, verified before LibTorch's loader sees a byte:
//   bytes 0-7    "TRNCKPT\n"   magic
//   bytes 8-11   format version, little-endian uint32 (kCheckpointFrameVersion)
//   bytes 12-19  payload length in bytes, little-endian uint64
//   bytes 20-51  SHA-256 of the payload (OpenSSL)
//   bytes 52-    the payload: the torch archive (a zip, as torch::save writes it)
// A damaged file is refused in one line; a new checkpoint is verified before it replaces the last.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace training {

// What a run was started from, as config.yaml, decisions.json and the checkpoint store it: the
// config asked for (YAML) and the run's decisions (config/decisions.h's JSON).
struct RunInputs {
  std::string config_yaml;
  std::string decisions_json;
};

struct TrainState {
  int64_t epoch = 0;           // epochs completed
  int64_t step = 0;            // optimizer steps taken
  int64_t batch_in_epoch = 0;  // batches of the current (epoch+1) epoch already trained
  // Accumulators of the current, unfinished epoch (undefined when batch_in_epoch == 0).
  torch::Tensor loss_sum;  // float64 scalar: sum of per-sample training loss
  torch::Tensor correct;   // int64 scalar: correctly classified training samples
  int64_t seen = 0;        // training samples seen this epoch
  // Data-parallel, part-way through an epoch: each rank's own sums (index: the rank), which each
  // rank takes back on resume (its progress line and TensorBoard read its own); the scalars above
  // then hold their totals. Undefined otherwise.
  torch::Tensor rank_loss_sums;  // float64 [world_size]
  torch::Tensor rank_correct;    // int64 [world_size]
  torch::Tensor rank_seen;       // int64 [world_size]
  double train_seconds = 0.0;    // training time spent in this epoch so far
  int64_t peak_allocated = 0;    // this epoch's training peaks so far (with the process's since)
  int64_t peak_reserved = 0;
  int64_t skipped_steps = 0;  // fp16 steps skipped this epoch (inf/NaN gradients)
  int64_t world_size = 1;     // data-parallel ranks that wrote it (resume needs the same)
  int64_t batch_size = 0;     // training.batch_size that wrote it (mid-epoch resume needs it)
  std::string config_yaml;    // the config it was written with (read back; save takes its own)
  // GradScaler state (fp16 only; undefined otherwise).
  torch::Tensor grad_scale;
  torch::Tensor growth_tracker;
};

inline constexpr uint32_t kCheckpointFrameVersion = 3;
inline constexpr size_t kCheckpointHeaderBytes = 52;

// The framed file for `payload` (header + payload).
std::string frame_checkpoint(std::string_view payload);

// The payload of a framed file, verified: magic, version, length and checksum. Throws UserError
// naming `name` ("<name>: damaged checkpoint: ...") otherwise. Never reads past `bytes`.
std::string_view verified_payload(std::string_view bytes, const std::string& name);

// A run directory's checkpoint.pt, or a file path (a folder named "*.pt" is that path). Throws
// UserError when it is no regular file: "RUN/checkpoint.pt: a dangling symbolic link; no ...".
std::filesystem::path find_checkpoint(const std::filesystem::path& run_dir_or_file);

// `average`: the weight average (training.ema_decay), stored beside the model when given.
void save_checkpoint(const std::filesystem::path& file, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const TrainState& state,
                     const RunInputs& inputs, torch::nn::Module* average = nullptr);

// The inputs stored in a checkpoint.
RunInputs checkpoint_inputs(const std::filesystem::path& file);
// Where a checkpoint stands (epoch, step, batch_in_epoch, world_size, batch_size, config_yaml; no
// tensors): the report's "stopped" row. Throws UserError naming the file where it cannot be read.
TrainState checkpoint_position(const std::filesystem::path& file);

// Where a run stands, one wording for the log and the reports: "in epoch 3 after step 18" part-way
// through an epoch, "after epoch 2 (step 8)" at an epoch's end.
std::string position_text(const TrainState& state);

// Throws the UserError load_checkpoint would where the stored tensors (names, shapes) or optimizer
// state do not fit, reading nothing into `model`: a resume checks before it measures anything.
// Returns checkpoint_position's, for Trainer::check_resumable.
TrainState check_checkpoint_model(const std::filesystem::path& file, torch::nn::Module& model,
                                  torch::optim::Optimizer& optimizer);

// Restores model, optimizer, RNG (and into `average` a stored weight average, `*had_average`
// saying so) and returns the position to continue from; UserError where it does not fit.
TrainState load_checkpoint(const std::filesystem::path& file, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer, const torch::Device& device,
                           torch::nn::Module* average = nullptr, bool* had_average = nullptr);

}  // namespace training
