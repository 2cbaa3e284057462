// Gradient checkpointing in C++: a custom autograd function that runs a segment of residual
// blocks without keeping its activations, keeps only the segment's input, and recomputes the
// segment in backward with the forward's RNG and autocast state restored.
//
// BatchNorm: in training mode the recomputation would update the running mean/variance a
// second time. The segment's buffers are therefore saved before and restored after the
// recomputation, so running statistics see each batch once, exactly as without checkpointing
// (the normalisation itself uses the batch's own statistics, which the recomputation reproduces).
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

#include "models/resnet.h"

namespace training {

enum class CheckpointGranularity {
  Block,     // every residual block is a segment (least memory, most recomputation)
  Stage,     // every stage (layer1..layer4) is a segment
  Segments,  // the blocks split into `segments` nearly equal consecutive groups
};

// checkpointing.enabled: off, on (every segment of the granularity recomputed), or auto: the
// blocks in `blocks` recomputed, each alone, chosen per run to meet a memory budget
// (training/parts/checkpoint_choice.h).
enum class CheckpointMode { Off, On, Auto };

struct CheckpointingOptions {
  bool enabled() const { return mode_ != CheckpointMode::Off; }  // on or auto

  TORCH_ARG(CheckpointMode, mode) = CheckpointMode::Off;
  TORCH_ARG(CheckpointGranularity, granularity) = CheckpointGranularity::Block;
  TORCH_ARG(int64_t, segments) = 4;  // with granularity Segments
  // auto: the blocks recomputed, by name ("layer3.2"): given by hand, or nullopt until the
  // choice is made (the run's decisions, training/config/decisions.h, record it; a run builds
  // from the config with the choice in place). The choice's budget in bytes (0: from
  // memory.limit or the card, less `headroom`).
  TORCH_ARG(std::optional<std::vector<std::string>>, blocks);
  TORCH_ARG(int64_t, budget) = 0;
  TORCH_ARG(double, headroom) = 0.1;
};

// Runs segment.forward(x) keeping only x for backward. When x does not require grad there is
// nothing to recompute for, and the segment runs normally.
torch::Tensor checkpoint(const models::Segment& segment, const torch::Tensor& x);

// Segment sizes for a model with these stages under `options`.
std::vector<int64_t> checkpoint_segment_sizes(const CheckpointingOptions& options,
                                              const std::vector<int64_t>& stage_sizes);

// Auto: runs each one-block segment of `model` through checkpoint() when options.blocks names its
// block, plainly otherwise (std::logic_error when the blocks are not chosen yet;
// std::invalid_argument for a name the model has not).
models::SegmentRunner chosen_blocks_runner(const models::ResNetImpl& model,
                                           const CheckpointingOptions& options);

// Installs checkpointing on the model (or removes it when the mode is Off). Auto needs its blocks
// chosen (std::logic_error otherwise; std::invalid_argument for a name the model has not).
void apply_checkpointing(models::ResNetImpl& model, const CheckpointingOptions& options);

}  // namespace training
