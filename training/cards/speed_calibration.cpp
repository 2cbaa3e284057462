#include "training/cards/speed_calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

namespace training {

namespace {

constexpr int kDimensions = 5;
using Point = std::array<double, kDimensions>;

const char* const kNvidia =
    "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5 README (training "
    "performance, one GPU)";
const char* const kH200 = "docs/gpu.md (measured with this trainer)";

models::ResNetOptions imagenet_resnet50() {
  return models::ResNetOptions(50).stem(models::Stem::ImageNet).num_classes(1000);
}

double logistic(double x) {
  return 1 / (1 + std::exp(-x));
}
double logit(double p) {
  return std::log(p / (1 - p));
}

SpeedParameters parameters_at(const Point& x) {
  return {logistic(x[0]), logistic(x[1]), logistic(x[2]), logistic(x[3]), std::exp(x[4])};
}

struct FigureSteps {
  std::vector<PublishedFigure> figures;
  std::vector<Card> cards;
  std::vector<StepShape> shapes;
  std::vector<std::vector<StepOperation>> ops;
};

std::vector<double> predictions(const FigureSteps& steps, const SpeedParameters& p) {
  std::vector<double> out;
  for (size_t i = 0; i < steps.figures.size(); ++i) {
    out.push_back(estimate_step(steps.ops[i], steps.cards[i], steps.shapes[i],
                                /*allow_tf32=*/true, p)
                      .images_per_second());
  }
  return out;
}

double squared_log_error(const FigureSteps& steps, const Point& x) {
  const std::vector<double> predicted = predictions(steps, parameters_at(x));
  double sum = 0;
  for (size_t i = 0; i < predicted.size(); ++i) {
    const double e = std::log(predicted[i] / steps.figures[i].images_per_second);
    sum += e * e;
  }
  return sum;
}

// Nelder-Mead with the usual coefficients (reflection 1, expansion 2, contraction 1/2, shrink
// 1/2), from `start` with steps of 0.5 along each axis.
Point minimise(const FigureSteps& steps, const Point& start, int& evaluations) {
  std::array<Point, kDimensions + 1> simplex;
  std::array<double, kDimensions + 1> value{};
  auto f = [&](const Point& x) { return ++evaluations, squared_log_error(steps, x); };
  for (int i = 0; i <= kDimensions; ++i) {
    simplex[i] = start;
    if (i > 0) simplex[i][i - 1] += 0.5;
    value[i] = f(simplex[i]);
  }
  auto along = [](const Point& from, const Point& to, double t) {
    Point p{};
    for (int d = 0; d < kDimensions; ++d) p[d] = from[d] + t * (to[d] - from[d]);
    return p;
  };
  for (int iteration = 0; iteration < 4000; ++iteration) {
    std::array<int, kDimensions + 1> order{};
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return value[a] < value[b]; });
    const int best = order[0], worst = order[kDimensions], second = order[kDimensions - 1];
    if (value[worst] - value[best] < 1e-12) break;
    Point centre{};
    for (int i : order) {
      if (i == worst) continue;
      for (int d = 0; d < kDimensions; ++d) centre[d] += simplex[i][d] / kDimensions;
    }
    const Point reflected = along(centre, simplex[worst], -1);
    const double r = f(reflected);
    if (r < value[best]) {
      const Point expanded = along(centre, simplex[worst], -2);
      const double e = f(expanded);
      simplex[worst] = e < r ? expanded : reflected;
      value[worst] = std::min(e, r);
    } else if (r < value[second]) {
      simplex[worst] = reflected, value[worst] = r;
    } else {
      const Point contracted = along(centre, simplex[worst], 0.5);
      const double c = f(contracted);
      if (c < value[worst]) {
        simplex[worst] = contracted, value[worst] = c;
      } else {
        for (int i = 0; i <= kDimensions; ++i) {
          if (i == best) continue;
          simplex[i] = along(simplex[best], simplex[i], 0.5);
          value[i] = f(simplex[i]);
        }
      }
    }
  }
  return simplex[std::min_element(value.begin(), value.end()) - value.begin()];
}

}  // namespace

std::string PublishedFigure::setting() const {
  return fmt::format("ResNet-{} {}x{} {} {} batch {}", model.depth(), image_size, image_size,
                     precision_name(precision), channels_last ? "channels_last" : "contiguous",
                     batch);
}

const std::vector<PublishedFigure>& calibration_figures() {
  const auto cifar50 = models::ResNetOptions(50), cifar18 = models::ResNetOptions(18);
  static const std::vector<PublishedFigure> figures = {
      {"V100-16GB", imagenet_resnet50(), 224, Precision::FP32, false, 112, 367, kNvidia},
      {"V100-16GB", imagenet_resnet50(), 224, Precision::FP16, true, 256, 1200, kNvidia},
      {"V100-32GB", imagenet_resnet50(), 224, Precision::FP32, false, 256, 356, kNvidia},
      {"V100-32GB", imagenet_resnet50(), 224, Precision::FP16, true, 256, 1156, kNvidia},
      {"A100-80GB-SXM", imagenet_resnet50(), 224, Precision::FP32, false, 256, 938, kNvidia},
      {"A100-80GB-SXM", imagenet_resnet50(), 224, Precision::FP16, true, 256, 2470, kNvidia},
      {"H200", cifar50, 32, Precision::BF16, true, 512, 15304, kH200},
      // One epoch of configs/resnet50_cifar10.yaml: 390 steps of 128 in 12.9 s.
      {"H200", cifar50, 32, Precision::BF16, true, 128, 390.0 * 128 / 12.9, kH200},
      {"H200", cifar18, 32, Precision::FP32, false, 768, 21371, kH200},
  };
  return figures;
}

StepShape figure_step(const PublishedFigure& figure) {
  StepShape shape;
  shape.model = figure.model;
  shape.image_size = figure.image_size;
  shape.batch = figure.batch;
  shape.precision = figure.precision;
  shape.channels_last = figure.channels_last;
  return shape;
}

SpeedFit fit_speed(const std::vector<PublishedFigure>& figures) {
  FigureSteps steps;
  steps.figures = figures;
  for (const auto& figure : figures) {
    steps.cards.push_back(find_card(figure.card));
    steps.shapes.push_back(figure_step(figure));
    steps.ops.push_back(step_operations(steps.shapes.back()));
  }
  const SpeedParameters initial;
  const Point start = {logit(initial.half_efficiency), logit(initial.tf32_efficiency),
                       logit(initial.fp32_efficiency), logit(initial.memory_efficiency),
                       std::log(initial.launch_seconds)};
  SpeedFit fit;
  fit.parameters = parameters_at(minimise(steps, start, fit.evaluations));
  fit.predicted = predictions(steps, fit.parameters);
  for (size_t i = 0; i < figures.size(); ++i) {
    fit.residuals.push_back(fit.predicted[i] / figures[i].images_per_second - 1);
  }
  return fit;
}

const SpeedFit& fitted_speed() {
  static const SpeedFit fit = fit_speed(calibration_figures());
  return fit;
}

StepEstimate predict_step(const Config& config, int64_t batch, const Card& card) {
  const StepShape shape = StepShape::of(config, batch);
  if (const std::string why = speed_unknown(card, shape.precision, config.training.allow_tf32);
      !why.empty()) {
    throw std::invalid_argument(why);  // before the step's operations are recorded
  }
  if (config.training.cuda_graph != CudaGraphMode::Off && cuda_graph_obstacle(config).empty()) {
    throw std::invalid_argument(
        "training.cuda_graph: a graph-captured step's speed is not estimated (no captured step has "
        "been measured to calibrate it); speeds are for the eager step, training.cuda_graph: off");
  }
  return estimate_step(step_operations(shape), card, shape, config.training.allow_tf32,
                       fitted_speed().parameters);
}

std::string calibration_report() {
  const SpeedFit& fit = fitted_speed();
  const auto& figures = calibration_figures();
  std::string out = fmt::format("{}, fitted on {} published figures ({} evaluations):\n\n",
                                kSpeedModelName, figures.size(), fit.evaluations);
  out += "| card | setting | published img/s | predicted img/s | residual | source |\n";
  out += "|---|---|---:|---:|---:|---|\n";
  for (size_t i = 0; i < figures.size(); ++i) {
    out += fmt::format("| {} | {} | {:.0f} | {:.0f} | {:+.1f}% | {} |\n", figures[i].card,
                       figures[i].setting(), figures[i].images_per_second, fit.predicted[i],
                       100 * fit.residuals[i], figures[i].source);
  }
  const SpeedParameters& p = fit.parameters;
  out += fmt::format(
      "\nfitted: fp16/bf16 tensor-core GEMMs at {:.1f}% of peak, TF32 {:.1f}%, fp32 {:.1f}%; "
      "memory at {:.1f}% of bandwidth; {:.1f} us of host time a kernel launch\n",
      100 * p.half_efficiency, 100 * p.tf32_efficiency, 100 * p.fp32_efficiency,
      100 * p.memory_efficiency, 1e6 * p.launch_seconds);
  return out;
}

}  // namespace training
