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

#include <vector>

#include "models/resnet.h"

namespace training {

enum class CheckpointGranularity {
  Block,     // every residual block is a segment (least memory, most recomputation)
  Stage,     // every stage (layer1..layer4) is a segment
  Segments,  // the blocks split into `segments` nearly equal consecutive groups
};

struct CheckpointingOptions {
  TORCH_ARG(bool, enabled) = false;
  TORCH_ARG(CheckpointGranularity, granularity) = CheckpointGranularity::Block;
  TORCH_ARG(int64_t, segments) = 4;  // with granularity Segments
};

// Runs segment.forward(x) keeping only x for backward. When x does not require grad there is
// nothing to recompute for, and the segment runs normally.
torch::Tensor checkpoint(const models::Segment& segment, const torch::Tensor& x);

// Segment sizes for a model with these stages under `options`.
std::vector<int64_t> checkpoint_segment_sizes(const CheckpointingOptions& options,
                                              const std::vector<int64_t>& stage_sizes);

// Installs checkpointing on the model (or removes it when options.enabled is false).
void apply_checkpointing(models::ResNetImpl& model, const CheckpointingOptions& options);

}  // namespace training
