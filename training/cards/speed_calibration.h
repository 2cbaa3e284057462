// The speed model's figures (speed_model.h): its efficiencies and launch cost fitted on
// published training throughput, and on nothing else. The calibration set is the one issue 53
// names: NVIDIA DeepLearningExamples' ResNet-50 v1.5 (PyTorch, 224x224, 1000 classes, one GPU:
// its README's training performance tables) and the H200 figures of docs/gpu.md. Other published
// tables are held out to measure the model's error (docs/memory-studies.md) and are not here.
//
// The fit: Nelder-Mead on the sum of squared log errors (each figure's predicted over published
// images/s), efficiencies kept in (0, 1) by a logistic, the launch cost positive by an
// exponential. It runs once per process (a fraction of a second) and is deterministic.
#pragma once

#include <string>
#include <vector>

#include "training/cards/speed_model.h"

namespace training {

struct PublishedFigure {
  std::string card;
  models::ResNetOptions model;
  int64_t image_size = 224;
  Precision precision = Precision::FP32;
  bool channels_last = false;
  int64_t batch = 0;
  double images_per_second = 0;
  std::string source;
  std::string setting() const;  // "fp32 contiguous batch 112"
};

const std::vector<PublishedFigure>& calibration_figures();

// The step the figure ran: SGD with momentum, multi-tensor (PyTorch's foreach, training's fused).
StepShape figure_step(const PublishedFigure& figure);

struct SpeedFit {
  SpeedParameters parameters;
  std::vector<double> predicted;  // images/s, per calibration figure
  std::vector<double> residuals;  // predicted / published - 1
  int evaluations = 0;
};

SpeedFit fit_speed(const std::vector<PublishedFigure>& figures);
const SpeedFit& fitted_speed();  // of calibration_figures(), fitted once

// The fitted model for `config` (its setting applied) at `batch` on `card`. Throws
// std::invalid_argument where the card has no speed (speed_model.h's speed_unknown) or the
// setting cannot be predicted.
StepEstimate predict_step(const Config& config, int64_t batch, const Card& card);

// The fit as a markdown table: each figure, published, predicted, residual; then the figures.
std::string calibration_report();

}  // namespace training
