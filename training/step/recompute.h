// Gradient checkpointing in C++: a custom autograd function that runs a segment of residual
// blocks without keeping its activations, keeps only the segment's input, and recomputes the
// segment in backward with the forward's RNG and autocast state restored.
//
// BatchNorm: the segment's buffers are saved before and restored after the recomputation, so the
// running statistics see each batch once, as without checkpointing.
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
  // auto: the blocks recomputed ("layer3.2"), given by hand or nullopt until chosen; the choice's
  // budget in bytes (0: memory.limit or the card, less `headroom`).
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

// Auto: runs each one-block segment of `model` through checkpoint() when options.blocks (chosen
// already) names its block, plainly otherwise (std::invalid_argument for a name the model has not).
models::SegmentRunner chosen_blocks_runner(const models::ResNetImpl& model,
                                           const CheckpointingOptions& options);

// Installs checkpointing on the model (or removes it when the mode is Off); auto as above.
void apply_checkpointing(models::ResNetImpl& model, const CheckpointingOptions& options);

}  // namespace training
