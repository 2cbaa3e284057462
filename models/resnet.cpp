#include "models/resnet.h"

#include <map>
#include <stdexcept>

namespace models {
namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// A 1x1 projection on the shortcut when the block changes resolution or width; null otherwise.
torch::nn::Sequential make_downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return torch::nn::Sequential(nullptr);
  return torch::nn::Sequential(conv(in, out, 1, stride), torch::nn::BatchNorm2d(out));
}

struct StageLayout {
  bool bottleneck;
  std::vector<int64_t> blocks;  // blocks per stage, layer1..layer4
};

const std::map<int64_t, StageLayout>& layouts() {
  static const std::map<int64_t, StageLayout> table = {
      {18, {false, {2, 2, 2, 2}}},  {34, {false, {3, 4, 6, 3}}},  {50, {true, {3, 4, 6, 3}}},
      {101, {true, {3, 4, 23, 3}}}, {152, {true, {3, 8, 36, 3}}},
  };
  return table;
}

}  // namespace

int64_t smallest_feature_map(const ResNetOptions& options, int64_t image_size) {
  // Each stride-2 step here (the 7x7 stem, the max-pool, the 3x3 of a stage's first block and its
  // 1x1 downsample) has padding kernel / 2: an n x n map becomes ceil(n / 2).
  const auto halved = [](int64_t n) { return (n + 1) / 2; };
  int64_t side = image_size;
  if (options.stem() == Stem::ImageNet) side = halved(halved(side));  // conv1, max-pool
  for (int stage = 2; stage <= 4; ++stage) side = halved(side);       // layer2..layer4
  return side * side;
}

int64_t smallest_trainable_batch(const ResNetOptions& options, int64_t image_size) {
  return smallest_feature_map(options, image_size) > 1 ? 1 : 2;
}

int64_t block_input_elements(const ResNetOptions& options, int64_t image_size) {
  const auto layout = layouts().find(options.depth());
  if (layout == layouts().end()) return 0;
  const auto halved = [](int64_t n) { return (n + 1) / 2; };  // a stride-2 step, as above
  int64_t side = options.stem() == Stem::ImageNet ? halved(halved(image_size)) : image_size;
  int64_t channels = 64, elements = 0;
  const int64_t expansion = layout->second.bottleneck ? 4 : 1;
  for (size_t stage = 0; stage < layout->second.blocks.size(); ++stage) {
    for (int64_t block = 0; block < layout->second.blocks[stage]; ++block) {
      elements += channels * side * side;
      if (stage > 0 && block == 0) side = halved(side);
      channels = (int64_t{64} << stage) * expansion;
    }
  }
  return elements;
}

const std::vector<int64_t>& supported_depths() {
  static const std::vector<int64_t> depths = [] {
    std::vector<int64_t> d;
    for (const auto& [depth, layout] : layouts()) d.push_back(depth);
    return d;
  }();
  return depths;
}

std::vector<std::string> block_names(int64_t depth) {
  std::vector<std::string> names;
  const auto layout = layouts().find(depth);
  if (layout == layouts().end()) return names;
  for (size_t stage = 0; stage < layout->second.blocks.size(); ++stage) {
    for (int64_t block = 0; block < layout->second.blocks[stage]; ++block) {
      names.push_back("layer" + std::to_string(stage + 1) + "." + std::to_string(block));
    }
  }
  return names;
}

BasicBlockImpl::BasicBlockImpl(int64_t in_channels, int64_t width, int64_t stride) {
  conv1 = register_module("conv1", conv(in_channels, width, 3, stride));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(width));
  conv2 = register_module("conv2", conv(width, width, 3, 1));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(width));
  downsample = make_downsample(in_channels, width * kExpansion, stride);
  if (downsample) register_module("downsample", downsample);
}

// In-place ReLU and residual add, as torchvision's blocks do: BatchNorm's backward needs its
// input, not its output, so overwriting the output saves one activation per ReLU.
torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  auto out = bn1(conv1(x)).relu_();
  out = bn2(conv2(out));
  out += downsample ? downsample->forward(x) : x;
  return torch::relu_(out);
}

BottleneckImpl::BottleneckImpl(int64_t in_channels, int64_t width, int64_t stride) {
  // torchvision's "ResNet v1.5": the stride sits on the 3x3 conv, not on the first 1x1.
  conv1 = register_module("conv1", conv(in_channels, width, 1, 1));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(width));
  conv2 = register_module("conv2", conv(width, width, 3, stride));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(width));
  conv3 = register_module("conv3", conv(width, width * kExpansion, 1, 1));
  bn3 = register_module("bn3", torch::nn::BatchNorm2d(width * kExpansion));
  downsample = make_downsample(in_channels, width * kExpansion, stride);
  if (downsample) register_module("downsample", downsample);
}

torch::Tensor BottleneckImpl::forward(const torch::Tensor& x) {
  auto out = bn1(conv1(x)).relu_();
  out = bn2(conv2(out)).relu_();
  out = bn3(conv3(out));
  out += downsample ? downsample->forward(x) : x;
  return torch::relu_(out);
}

namespace {

template <typename Block>
torch::nn::Sequential make_stage(int64_t& in_channels, int64_t width, int64_t count,
                                 int64_t stride) {
  torch::nn::Sequential stage;
  for (int64_t i = 0; i < count; ++i) {
    stage->push_back(Block(in_channels, width, i == 0 ? stride : 1));
    in_channels = width * Block::Impl::kExpansion;
  }
  return stage;
}

}  // namespace

ResNetImpl::ResNetImpl(const ResNetOptions& options) : options_(options) {
  auto layout = layouts().find(options.depth());
  if (layout == layouts().end()) {
    throw std::invalid_argument("ResNet depth " + std::to_string(options.depth()) +
                                " is not one of 18, 34, 50, 101, 152");
  }
  if (options.num_classes() < 1) throw std::invalid_argument("ResNet num_classes must be >= 1");

  const bool cifar = options.stem() == Stem::Cifar;
  conv1 = register_module("conv1", cifar ? conv(3, 64, 3, 1) : conv(3, 64, 7, 2));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(64));

  auto build = [&](int64_t& in, int64_t width, int64_t count, int64_t stride) {
    return layout->second.bottleneck ? make_stage<Bottleneck>(in, width, count, stride)
                                     : make_stage<BasicBlock>(in, width, count, stride);
  };
  int64_t in_channels = 64;
  const auto& counts = layout->second.blocks;
  layer1 = register_module("layer1", build(in_channels, 64, counts[0], 1));
  layer2 = register_module("layer2", build(in_channels, 128, counts[1], 2));
  layer3 = register_module("layer3", build(in_channels, 256, counts[2], 2));
  layer4 = register_module("layer4", build(in_channels, 512, counts[3], 2));
  fc = register_module("fc", torch::nn::Linear(in_channels, options.num_classes()));

  // torchvision's init: He-normal (fan_out) convs, BN weight 1 / bias 0, Linear left at its
  // default (uniform +-1/sqrt(fan_in)), which LibTorch's Linear already matches.
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      torch::nn::init::ones_(bn->weight);
      torch::nn::init::zeros_(bn->bias);
    }
  }
  for (auto& layer : {layer1, layer2, layer3, layer4}) {
    for (const auto& block : *layer) blocks_.push_back(block);
  }
  // After the init loop, which would otherwise set these weights back to one.
  if (options.zero_init_residual()) {
    for (auto& block : blocks_) {
      auto basic = std::dynamic_pointer_cast<BasicBlockImpl>(block.ptr());
      auto bn = basic ? basic->last_bn() : block.ptr<BottleneckImpl>()->last_bn();
      torch::nn::init::zeros_(bn->weight);
    }
  }
}

std::vector<int64_t> ResNetImpl::stage_sizes() const {
  return layouts().at(options_.depth()).blocks;
}

void ResNetImpl::set_segments(const std::vector<int64_t>& sizes, SegmentRunner runner) {
  segments_.clear();
  runner_ = std::move(runner);
  if (sizes.empty()) return;
  int64_t total = 0;
  for (int64_t size : sizes) {
    if (size < 1) throw std::invalid_argument("segment sizes must be positive");
    total += size;
  }
  if (total != static_cast<int64_t>(blocks_.size())) {
    throw std::invalid_argument("segment sizes add up to " + std::to_string(total) +
                                ", the model has " + std::to_string(blocks_.size()) + " blocks");
  }
  size_t begin = 0;
  for (int64_t size : sizes) {
    Segment segment;
    segment.first_block = static_cast<int64_t>(begin);
    std::vector<torch::nn::AnyModule> members(blocks_.begin() + begin,
                                              blocks_.begin() + begin + size);
    for (auto& member : members) segment.modules.push_back(member.ptr());
    segment.forward = [members](const torch::Tensor& input) mutable {
      torch::Tensor x = input;
      for (auto& block : members) x = block.forward(x);
      return x;
    };
    segments_.push_back(std::move(segment));
    begin += size;
  }
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = bn1(conv1(x)).relu_();
  if (options_.stem() == Stem::ImageNet) {
    x = F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2).padding(1));
  }
  if (segments_.empty()) {
    for (auto& block : blocks_) x = block.forward(x);
  } else {
    for (const auto& segment : segments_) x = runner_(segment, x);
  }
  x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
  return fc(x);
}

void convert_memory_format(torch::nn::Module& module, c10::MemoryFormat format) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(format));
  }
  for (auto& b : module.buffers()) {
    if (b.dim() == 4) b.set_data(b.contiguous(format));
  }
}

}  // namespace models
