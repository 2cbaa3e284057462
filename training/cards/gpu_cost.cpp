#include "training/cards/gpu_cost.h"

#include <torch/torch.h>

#include <algorithm>

namespace training {

namespace {

int64_t output_size(int64_t in, const torch::nn::detail::ConvNdOptions<2>& o) {
  const int64_t kernel = (*o.kernel_size())[0], stride = (*o.stride())[0];
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  const int64_t pad = padding ? (**padding)[0] : 0;
  return (in + 2 * pad - kernel) / stride + 1;
}

// "layer2.3.downsample.0" -> 2 dots before "downsample": the block is "layer2.3".
bool in_block(const std::string& name) {
  return name.rfind("layer", 0) == 0 && std::count(name.begin(), name.end(), '.') >= 2;
}

}  // namespace

ForwardCount count_forward(const models::ResNetOptions& options, int64_t image_size) {
  torch::NoGradGuard no_grad;
  models::ResNet model(options);
  ForwardCount count;
  int64_t size = image_size, block_in = image_size;
  std::string block;
  for (const auto& item : model->named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    if (const auto* conv = item.value()->as<torch::nn::Conv2d>()) {
      const auto& o = conv->options;
      const bool blockwise = in_block(name);
      const std::string owner = blockwise ? name.substr(0, name.find('.', name.find('.') + 1)) : "";
      if (owner != block) block = owner, block_in = size;
      const bool shortcut = name.find(".downsample.") != std::string::npos;
      const int64_t in = shortcut ? block_in : size;
      const int64_t out = output_size(in, o);
      const double flops =
          2.0 * static_cast<double>(o.out_channels() * out * out * o.in_channels() / o.groups()) *
          static_cast<double>((*o.kernel_size())[0] * (*o.kernel_size())[1]);
      count.flops_per_image += flops;
      if (blockwise) count.block_flops_per_image += flops;
      ++count.convolutions;
      if (!shortcut) size = out;
      if (name == "conv1" && options.stem() == models::Stem::ImageNet) {
        size = (size + 2 - 3) / 2 + 1;  // the 3x3/2 max-pool after the stem
      }
    } else if (const auto* fc = item.value()->as<torch::nn::Linear>()) {
      count.flops_per_image +=
          2.0 * static_cast<double>(fc->options.in_features() * fc->options.out_features());
    }
  }
  return count;
}

double card_peak_flops(const Card& card, Precision precision, bool allow_tf32) {
  const double tera = 1e12;
  const DataSheet& sheet = card.sheet;
  switch (precision) {
    case Precision::BF16:
      return card.compute_major >= 8 ? sheet.half_tflops * tera : 0;
    case Precision::FP16:
      return sheet.half_tflops * tera;
    case Precision::FP32:
      return (allow_tf32 && sheet.tf32_tflops > 0 ? sheet.tf32_tflops : sheet.fp32_tflops) * tera;
  }
  return 0;
}

double estimated_step_seconds(const ForwardCount& count, const Card& card, Precision precision,
                              bool checkpointing, bool allow_tf32, int64_t batch) {
  const double peak = card_peak_flops(card, precision, allow_tf32);
  if (peak <= 0) return 0;
  const double flops =
      (3 * count.flops_per_image + (checkpointing ? count.block_flops_per_image : 0)) *
      static_cast<double>(batch);
  const double floor = kResNet50LaunchFloorSeconds * static_cast<double>(count.convolutions) /
                       static_cast<double>(kResNet50Convolutions);
  return std::max(floor, flops / (peak * kMeasuredEfficiency));
}

}  // namespace training
