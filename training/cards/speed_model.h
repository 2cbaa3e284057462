// How long a training step takes on a card, from its operations (step_operations.h) and the
// card's data sheet (cards.h). Per operation, the larger of
//   - its compute time: FLOPs at the card's peak for the unit it runs on (a GEMM on the tensor
//     cores at fp16/bf16; for fp32 the fp32 peak, or where training.allow_tf32 and the card has
//     TF32 the faster of TF32 and fp32, each times its efficiency), times the efficiency fitted,
//     divided by the share of the last wave of 128x128 output tiles the card's SMs fill (a GEMM
//     of 1.1 waves runs as 2); elementwise operations at the fp32 peak;
//   - its memory time: bytes / (bandwidth x the fitted memory efficiency).
// The card runs them one after another: their sum is the GPU's time. The host launches every
// kernel, asynchronously: a step takes the larger of the GPU's time and the host's (kernels x the
// fitted cost of a launch), the measured behaviour (docs/gpu.md: ResNet-50 at 32x32 on an H200
// took 33.0 ms a step at batch 128 and 33.5 ms at 512, four times the work). A graph-captured
// step (training.cuda_graph) is not estimated: no captured step has been measured to calibrate
// what its kernels cost without the host (speed_calibration.h's predict_step refuses it).
// The efficiencies and the launch cost are fitted on published figures (speed_calibration.h).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "training/cards/cards.h"
#include "training/cards/step_operations.h"

namespace training {

inline constexpr const char* kSpeedModelName = "per-operation roofline v1 (speed_model.h)";

struct SpeedParameters {
  double half_efficiency = 0.5;  // of the fp16/bf16 tensor-core peak, GEMMs
  double tf32_efficiency = 0.5;  // of the TF32 peak, GEMMs
  double fp32_efficiency = 0.5;  // of the fp32 (CUDA core) peak, GEMMs
  double memory_efficiency = 0.7;
  double launch_seconds = 20e-6;  // the host's cost of one kernel launch, eager
};

struct KindTime {
  double seconds = 0;          // on the GPU
  double compute_seconds = 0;  // of them, operations whose compute time is the larger
  int64_t kernels = 0;
  // Its operations are mostly compute-bound: those whose compute time is the larger take at least
  // half its time (of a kind, or of the whole step).
  bool compute_bound() const { return compute_seconds >= seconds / 2; }
};

struct StepEstimate {
  double gpu_seconds = 0, host_seconds = 0;
  double seconds = 0;  // the larger of the two
  int64_t images = 0;  // a step's: batch x accumulate_steps
  std::array<KindTime, kOpKinds> kinds{};
  double images_per_second() const {
    return seconds > 0 ? static_cast<double>(images) / seconds : 0;
  }
  bool launch_bound() const { return host_seconds > gpu_seconds; }
  // "memory-bound: BatchNorm and ReLU 58% of the step", "launch-bound: the host's 812 kernel
  // launches take 33.1 ms, the GPU's work 12.0 ms; a batch up to about 2.8x larger adds GPU work,
  // no launches".
  std::string why() const;
};

// Why a card cannot be estimated ("" when it can): a card given by its size, a data sheet
// without the peak that precision needs, bf16 before sm_80.
std::string speed_unknown(const Card& card, Precision precision, bool allow_tf32);

// Throws std::invalid_argument with speed_unknown's reason.
StepEstimate estimate_step(const std::vector<StepOperation>& ops, const Card& card,
                           const StepShape& shape, bool allow_tf32,
                           const SpeedParameters& parameters);

}  // namespace training
