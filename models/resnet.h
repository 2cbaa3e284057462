// ResNet-18/34/50/101/152 in the LibTorch C++ frontend style (modules + an options struct).
// Parameter names follow torchvision (conv1, bn1, layer1.0.conv1, ..., fc), so counts and
// state-dict keys can be compared one to one.
#pragma once

#include <torch/nn.h>

#include <functional>
#include <string>
#include <vector>

namespace models {

enum class Stem {
  Cifar,     // 3x3/1 conv, no max-pool: the standard CIFAR ResNet (32x32 stays 32x32)
  ImageNet,  // torchvision's 7x7/2 conv + 3x3/2 max-pool (32x32 becomes 8x8 before layer1)
};

struct ResNetOptions {
  ResNetOptions(int64_t depth = 50) : depth_(depth) {}
  TORCH_ARG(int64_t, depth);  // 18, 34, 50, 101 or 152
  TORCH_ARG(Stem, stem) = Stem::Cifar;
  TORCH_ARG(int64_t, num_classes) = 10;
  // Zero the last BN weight of each residual branch, so every block starts as the identity.
  TORCH_ARG(bool, zero_init_residual) = false;
};

// The depths torchvision defines; anything else is refused by the ResNet constructor.
const std::vector<int64_t>& supported_depths();

// The residual blocks of a ResNet of `depth` in forward order, named as torchvision names their
// modules: "layer1.0", ..., "layer4.2". Empty for a depth not supported.
std::vector<std::string> block_names(int64_t depth);

// The height x width of the model's smallest feature map for `image_size` x `image_size` inputs:
// layer4's output (4x4 with the CIFAR stem at 32, 1x1 with the ImageNet stem at 32, 7x7 at 224).
// A BatchNorm normalises batch x (its map's height x width) values per channel, and in training
// needs more than one: where this is 1, a batch of 1 does not train.
int64_t smallest_feature_map(const ResNetOptions& options, int64_t image_size);
// The smallest batch the model trains on at `image_size`: 1, or 2 where smallest_feature_map is 1.
int64_t smallest_trainable_batch(const ResNetOptions& options, int64_t image_size);
// The elements, per image, of every residual block's input at `image_size` x `image_size` (the
// stem's output, then each block's output but the last's): what a step with every block recomputed
// keeps through its forward for the backward. 303,104 for ResNet-18 with the CIFAR stem at 32.
int64_t block_input_elements(const ResNetOptions& options, int64_t image_size);

class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in_channels, int64_t width, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::BatchNorm2d last_bn() { return bn2; }

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in_channels, int64_t width, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::BatchNorm2d last_bn() { return bn3; }

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

// A run of consecutive residual blocks, as gradient checkpointing sees it: the modules whose
// state it must look after and the function that runs them.
struct Segment {
  int64_t first_block = 0;  // the index of its first block in forward order
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

// Runs one segment. Gradient checkpointing installs a runner that keeps only the segment's
// input and recomputes the segment in backward instead of keeping its activations.
using SegmentRunner = std::function<torch::Tensor(const Segment& segment, const torch::Tensor& x)>;

class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  torch::Tensor forward(torch::Tensor x);

  // Every residual block in forward order (layer1.0 ... layer4.N).
  std::vector<torch::nn::AnyModule>& blocks() { return blocks_; }
  // Blocks per stage (layer1..layer4), e.g. {3, 4, 6, 3} for ResNet-50.
  std::vector<int64_t> stage_sizes() const;
  // Groups the blocks into consecutive segments of the given sizes (which must add up to the
  // number of blocks) and runs each through `runner`. An empty list restores the plain forward.
  void set_segments(const std::vector<int64_t>& sizes, SegmentRunner runner);
  // The segments set_segments made (none for the plain forward).
  const std::vector<Segment>& segments() const { return segments_; }
  const ResNetOptions& options() const { return options_; }

 private:
  ResNetOptions options_;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
  std::vector<torch::nn::AnyModule> blocks_;
  std::vector<Segment> segments_;
  SegmentRunner runner_;
};
TORCH_MODULE(ResNet);

// Lays out every 4-d parameter and buffer of `module` in `format` (channels_last makes
// convolutions run NHWC; the inputs must be converted too).
void convert_memory_format(torch::nn::Module& module, c10::MemoryFormat format);

}  // namespace models
