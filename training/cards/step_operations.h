// A training step on a card, operation by operation: from the model's recorded forward
// (forward_layers.h), every operation the step runs for a setting, with its FLOPs, the bytes it
// reads and writes for that precision and layout, and the kernels it launches:
//   - the input: uint8 to float in its layout, normalised, resized to data.image_size;
//   - the forward: convolutions, BatchNorm (and its counter), ReLU, residual adds, pooling, the
//     classifier, the loss; under AMP each weight's cast, and in the contiguous layout the
//     NCHW<->NHWC transposes cuDNN's tensor-core kernels run around each half-precision
//     convolution call (its operands and result, in the forward and each gradient);
//   - the checkpointed blocks' recomputed forward, their BatchNorm statistics saved and restored;
//   - the backward of each (no input gradient for the first convolution), a residual input's two
//     gradients summed, the weight gradients cast back to fp32 under AMP;
//   - per micro-batch, the trainer's running sums of the loss and the correct predictions; after
//     the first, the gradients accumulated, and before it BatchNorm's buffers copied;
//   - the update: SGD fused (multi-tensor launches) or per parameter, fp16's GradScaler, the
//     weight average.
// BatchNorm runs cuDNN's one kernel each way in fp32 and fp16 and ATen's own kernels in bf16
// (ATen's _select_batch_norm_backend).
// Bytes count each tensor read or written once per pass over it; what a cache keeps is not
// modelled. Counts are exact for the layout the model runs; a kernel library's choices (split-K
// reductions, fused epilogues) are not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "training/config/config.h"

namespace training {

enum class OpKind {
  Input,
  Convolution,
  BatchNorm,
  ReLU,
  ResidualAdd,
  Pooling,
  Classifier,
  Loss,
  Cast,       // AMP's casts of weights and their gradients
  Layout,     // NCHW <-> NHWC transposes around tensor-core convolutions
  Gradients,  // accumulation across micro-batches, a residual input's two paths
  Optimizer,
  Scaler,  // fp16's GradScaler
  Other,
};
inline constexpr int kOpKinds = static_cast<int>(OpKind::Other) + 1;
const char* op_kind_name(OpKind kind);  // "convolution", "BatchNorm", ...

enum class OpPass { Forward, Recompute, Backward, Update };

struct StepOperation {
  OpKind kind = OpKind::Other;
  OpPass pass = OpPass::Forward;
  double flops = 0;
  double bytes = 0;  // read + written
  int64_t kernels = 0;
  bool matrix = false;  // a GEMM (convolution, classifier): on the card's matrix units
  // Its output as a GEMM (rows x columns), for the tiles against the card's SMs; 0 = not known.
  int64_t gemm_rows = 0, gemm_columns = 0;
  int64_t count = 1;  // times a step runs it (once per micro-batch: accumulate_steps)
};

// What of a setting decides the step's operations.
struct StepShape {
  models::ResNetOptions model;
  int64_t image_size = kStoredImageSize;  // data.image_size, as the model sees it
  int64_t batch = 1;                      // micro-batch
  int64_t accumulate_steps = 1;
  Precision precision = Precision::FP32;
  bool channels_last = true;
  std::vector<bool> recomputed;  // per residual block in forward order; empty = none
  bool fused_optimizer = true;
  bool momentum = true;
  bool nesterov = true;
  bool weight_decay = true;
  bool decay_norm_and_bias = false;
  bool weight_average = false;   // training.ema_decay > 0: the average updated after each step
  bool label_smoothing = false;  // training.label_smoothing > 0: ATen's smoothed cross-entropy

  // From a config (a card is CUDA: an automatic layout is channels_last). Throws
  // std::invalid_argument for checkpointing auto whose blocks are not chosen yet.
  static StepShape of(const Config& config, int64_t batch);
  int64_t images() const { return batch * accumulate_steps; }
};

std::vector<StepOperation> step_operations(const StepShape& shape);

// Bytes of one activation element: 2 under autocast (bf16/fp16), else 4.
int64_t activation_bytes(Precision precision);

}  // namespace training
