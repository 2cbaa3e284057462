// An estimate of a training step's time on a card it has not run on, for ranking settings on that
// card (train plan --card) where the sweep measured another device. Explicit and documented
// (docs/memory-studies.md, "Planning for a card you do not have"):
//
//   step time = max(launch floor, training FLOPs / (card peak for the precision x efficiency))
//
// - training FLOPs: the forward's convolutions and the classifier counted layer by layer for a
//   data.image_size image (2 FLOPs a multiply-add), times 3 for forward, input and weight
//   gradients, plus one more forward of the residual blocks with gradient checkpointing (their
//   recomputation);
// - card peak: the dense tensor-core peak for bf16/fp16, for fp32 the TF32 peak when
//   training.allow_tf32 and the card has one, else the fp32 peak (cards.h's DataSheet);
// - efficiency 12.0%: ResNet-50 (CIFAR stem) bf16 channels_last at batch 512 on an H200, 119.2
//   TFLOP/s (docs/gpu.md, run 2), used for every card, precision and data.image_size (measured at
//   32x32 only: at 224 with the ImageNet stem it is an assumption);
// - launch floor: 33.1 ms for ResNet-50's 53 convolutions on the H200 (390 steps of batch 128 in
//   12.9 s, docs/gpu.md run 1; batch 512 took 33.5 ms), scaled by the convolution count.
// Every figure it gives is marked "estimated".
#pragma once

#include <cstdint>

#include "models/resnet.h"
#include "training/cards/cards.h"
#include "training/config/config.h"

namespace training {

struct ForwardCount {
  double flops_per_image = 0;        // the forward's convolutions and classifier
  double block_flops_per_image = 0;  // of them, the residual blocks' (recomputed by checkpointing)
  int64_t convolutions = 0;
};

// Counted from the layers' shapes for an image_size x image_size input; no forward pass runs.
ForwardCount count_forward(const models::ResNetOptions& model, int64_t image_size);

inline constexpr double kMeasuredEfficiency = 0.120;
inline constexpr double kResNet50LaunchFloorSeconds = 0.0331;
inline constexpr int64_t kResNet50Convolutions = 53;

// The card's peak for `precision` in FLOP/s (0 = not known, or bf16 on a card before sm_80).
double card_peak_flops(const Card& card, Precision precision, bool allow_tf32);

// Estimated seconds a training step of `batch` takes on `card`; 0 when the card's peak is not
// known.
double estimated_step_seconds(const ForwardCount& count, const Card& card, Precision precision,
                              bool checkpointing, bool allow_tf32, int64_t batch);

}  // namespace training
