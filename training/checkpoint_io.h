// Checkpoints: model, optimizer, the position in the run, the partial-epoch accumulators, RNG
// state and the effective config, in one torch archive written atomically. Loading one and
// continuing gives the same per-epoch metrics as never having stopped.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <filesystem>
#include <string>

namespace training {

struct TrainState {
  int64_t epoch = 0;           // epochs completed
  int64_t step = 0;            // optimizer steps taken
  int64_t batch_in_epoch = 0;  // batches of the current (epoch+1) epoch already trained
  // Accumulators of the current, unfinished epoch (undefined when batch_in_epoch == 0).
  torch::Tensor loss_sum;      // float64 scalar: sum of per-sample training loss
  torch::Tensor correct;       // int64 scalar: correctly classified training samples
  int64_t seen = 0;            // training samples seen this epoch
  double train_seconds = 0.0;  // training time spent in this epoch so far
  int64_t skipped_steps = 0;   // fp16 steps skipped this epoch (inf/NaN gradients)
  int64_t world_size = 1;      // data-parallel ranks that wrote it (resume needs the same)
  // GradScaler state (fp16 only; undefined otherwise).
  torch::Tensor grad_scale;
  torch::Tensor growth_tracker;
};

// The checkpoint named by a run directory (its checkpoint.pt) or by a file path.
// Throws UserError when there is none.
std::filesystem::path find_checkpoint(const std::filesystem::path& run_dir_or_file);

void save_checkpoint(const std::filesystem::path& file, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const TrainState& state,
                     const std::string& config_yaml);

// The effective config stored in a checkpoint, as YAML.
std::string checkpoint_config(const std::filesystem::path& file);

// Restores model, optimizer and RNG into existing objects of the same shape; returns the
// position to continue from. Throws UserError naming the file when it does not fit the model.
TrainState load_checkpoint(const std::filesystem::path& file, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer, const torch::Device& device);

}  // namespace training
