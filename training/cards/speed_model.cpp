#include "training/cards/speed_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace training {

namespace {

constexpr double kTera = 1e12;
constexpr int64_t kTile = 128;

// A GEMM's output in tiles of 128 (no wider than the matrix): the tiles along `n`, and `n`
// rounded up to them.
int64_t tiles_along(int64_t n) {
  const int64_t tile = std::min(n, kTile);
  return (n + tile - 1) / tile;
}
double rounded_to_tiles(int64_t n) {
  return static_cast<double>(tiles_along(n) * std::min(n, kTile));
}

// The time of a GEMM's FLOPs at `flops_per_second`: its output tiles, each as much work as a
// whole one, in waves over the card's SMs (a last wave part-empty). A row more never takes
// less time: the FLOPs are those of whole tiles.
double gemm_seconds(const StepOperation& op, int sms, double flops_per_second) {
  const int64_t rows = op.gemm_rows, columns = op.gemm_columns;
  if (rows <= 0 || columns <= 0 || sms <= 0) return op.flops / flops_per_second;
  const double tiled = op.flops * rounded_to_tiles(rows) / static_cast<double>(rows) *
                       rounded_to_tiles(columns) / static_cast<double>(columns);
  const int64_t tiles = tiles_along(rows) * tiles_along(columns);
  const int64_t waves = (tiles + sms - 1) / sms;
  const double fill = static_cast<double>(tiles) / static_cast<double>(waves * sms);
  return tiled / flops_per_second / fill;
}

struct MatrixUnit {
  double peak = 0;  // FLOP/s
  double efficiency = 0;
};

MatrixUnit matrix_unit(const DataSheet& sheet, Precision precision, bool allow_tf32,
                       const SpeedParameters& p) {
  if (precision != Precision::FP32) return {sheet.half_tflops * kTera, p.half_efficiency};
  const MatrixUnit fp32{sheet.fp32_tflops * kTera, p.fp32_efficiency};
  if (!allow_tf32 || sheet.tf32_tflops <= 0) return fp32;
  // TF32 allowed: the libraries may still run CUDA-core kernels (cuDNN's benchmark mode keeps the
  // fastest), which on a card whose TF32 rate is its fp32 rate (GeForce) are the faster.
  const MatrixUnit tf32{sheet.tf32_tflops * kTera, p.tf32_efficiency};
  return tf32.peak * tf32.efficiency >= fp32.peak * fp32.efficiency ? tf32 : fp32;
}

}  // namespace

std::string speed_unknown(const Card& card, Precision precision, bool allow_tf32) {
  const DataSheet& sheet = card.sheet;
  if (!sheet.known() && sheet.bandwidth_gbps <= 0) {
    return "no data sheet for '" + card.name + "': speeds not estimated";
  }
  if (const std::string why = card.unsupported(precision); !why.empty()) return why;
  const bool tf32 = precision == Precision::FP32 && allow_tf32 && sheet.tf32_tflops > 0;
  const double peak = precision != Precision::FP32 ? sheet.half_tflops
                      : tf32                       ? sheet.tf32_tflops
                                                   : sheet.fp32_tflops;
  if (peak <= 0 || sheet.fp32_tflops <= 0 || sheet.bandwidth_gbps <= 0) {
    return card.name + "'s data sheet lacks the peak or the bandwidth a step at " +
           std::string(precision == Precision::FP32 ? "fp32" : "fp16/bf16") +
           " needs: speeds not estimated";
  }
  return "";
}

StepEstimate estimate_step(const std::vector<StepOperation>& ops, const Card& card,
                           const StepShape& shape, bool allow_tf32, const SpeedParameters& p) {
  if (const std::string why = speed_unknown(card, shape.precision, allow_tf32); !why.empty()) {
    throw std::invalid_argument(why);
  }
  const DataSheet& sheet = card.sheet;
  const MatrixUnit unit = matrix_unit(sheet, shape.precision, allow_tf32, p);
  const double bandwidth = sheet.bandwidth_gbps * 1e9 * p.memory_efficiency;
  const double vector_peak = sheet.fp32_tflops * kTera;
  StepEstimate estimate;
  estimate.images = shape.images();
  int64_t kernels = 0;
  for (const StepOperation& op : ops) {
    const double compute = op.matrix ? gemm_seconds(op, sheet.sms, unit.peak * unit.efficiency)
                                     : op.flops / vector_peak;
    const double memory = op.bytes / bandwidth;
    KindTime& kind = estimate.kinds[static_cast<size_t>(op.kind)];
    const double seconds = std::max(compute, memory) * static_cast<double>(op.count);
    kind.seconds += seconds;
    if (compute >= memory) kind.compute_seconds += seconds;
    kind.kernels += op.kernels * op.count;
    estimate.gpu_seconds += seconds;
    kernels += op.kernels * op.count;
  }
  estimate.host_seconds = static_cast<double>(kernels) * p.launch_seconds;
  estimate.seconds = std::max(estimate.gpu_seconds, estimate.host_seconds);
  return estimate;
}

std::string StepEstimate::why() const {
  int64_t kernels = 0;
  for (const auto& k : kinds) kernels += k.kernels;
  if (launch_bound()) {
    // The launches do not grow with the batch; the GPU's work about in proportion.
    const std::string larger =
        gpu_seconds > 0 ? fmt::format(
                              "; a batch up to about {:.{}f}x larger adds GPU work, no "
                              "launches",
                              host_seconds / gpu_seconds, host_seconds < 1.1 * gpu_seconds ? 2 : 1)
                        : "";
    return fmt::format(
        "launch-bound: the host's {} kernel launches take {:.1f} ms, the GPU's work {:.1f} ms{}",
        kernels, host_seconds * 1e3, gpu_seconds * 1e3, larger);
  }
  KindTime step{gpu_seconds, 0, kernels};
  for (const auto& k : kinds) step.compute_seconds += k.compute_seconds;
  const bool compute_bound = step.compute_bound();
  // The operations of the bound's kind, largest first, until half the step.
  std::vector<std::pair<double, int>> shares;
  for (int i = 0; i < kOpKinds; ++i) {
    const auto& k = kinds[static_cast<size_t>(i)];
    const double bound_seconds = compute_bound ? k.compute_seconds : k.seconds - k.compute_seconds;
    if (bound_seconds > 0) shares.emplace_back(bound_seconds, i);
  }
  std::sort(shares.rbegin(), shares.rend());
  std::vector<std::string> names;
  double share = 0;
  for (size_t i = 0; i < shares.size() && i < 3 && share < 0.5 * gpu_seconds; ++i) {
    names.push_back(op_kind_name(static_cast<OpKind>(shares[i].second)));
    share += shares[i].first;
  }
  std::string joined;
  for (size_t i = 0; i < names.size(); ++i) {
    joined += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  }
  return fmt::format("{}-bound: {} {:.0f}% of the step", compute_bound ? "compute" : "memory",
                     joined, 100 * share / seconds);
}

}  // namespace training
