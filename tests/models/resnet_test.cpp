#include "models/resnet.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

int64_t parameter_count(torch::nn::Module& model) {
  int64_t count = 0;
  for (const auto& p : model.parameters()) count += p.numel();
  return count;
}

models::ResNet make(int64_t depth, models::Stem stem, int64_t classes) {
  return models::ResNet(models::ResNetOptions(depth).stem(stem).num_classes(classes));
}

// torchvision.models.resnetXX(num_classes=1000): sum(p.numel() for p in m.parameters()).
TEST(ResNet, ParameterCountsMatchTorchvision) {
  const std::vector<std::pair<int64_t, int64_t>> expected = {
      {18, 11689512}, {34, 21797672}, {50, 25557032}, {101, 44549160}, {152, 60192808}};
  for (const auto& [depth, count] : expected) {
    auto model = make(depth, models::Stem::ImageNet, 1000);
    EXPECT_EQ(parameter_count(*model), count) << "resnet" << depth;
  }
}

TEST(ResNet, CifarStemAndTenClassesChangeOnlyStemAndHead) {
  // The 7x7x3x64 stem (9408) becomes 3x3x3x64 (1728); the head shrinks from 1000 to 10 outputs.
  auto model = make(50, models::Stem::Cifar, 10);
  EXPECT_EQ(parameter_count(*model), 25557032 - 9408 + 1728 - (2048 + 1) * 990);
}

TEST(ResNet, OutputShapesForBothStems) {
  torch::NoGradGuard no_grad;
  for (auto stem : {models::Stem::Cifar, models::Stem::ImageNet}) {
    for (int64_t depth : {18, 50}) {
      auto model = make(depth, stem, 10);
      model->eval();
      EXPECT_EQ(model->forward(torch::randn({2, 3, 32, 32})).sizes(), torch::IntArrayRef({2, 10}));
    }
  }
}

// The smallest feature map (layer4's output) is what each image gives the last BatchNorms: one
// value per channel (1x1) means a batch of 1 cannot train, as LibTorch says ("Expected more than 1
// value per channel when training"); the rule is checked against LibTorch itself, both stems, at
// sizes around each halving, in training mode at batch 1 (refused or not) and 2 (trains).
TEST(ResNet, TheSmallestFeatureMapSaysWhetherABatchOfOneTrains) {
  EXPECT_EQ(models::smallest_feature_map(models::ResNetOptions(50).stem(models::Stem::Cifar), 32),
            16);  // 4x4
  EXPECT_EQ(
      models::smallest_feature_map(models::ResNetOptions(50).stem(models::Stem::ImageNet), 32), 1);
  EXPECT_EQ(
      models::smallest_feature_map(models::ResNetOptions(50).stem(models::Stem::ImageNet), 224),
      49);  // 7x7
  for (auto stem : {models::Stem::Cifar, models::Stem::ImageNet}) {
    auto model = make(18, stem, 10);
    model->train();
    for (int64_t size : {8, 9, 15, 16, 17, 32, 33, 48}) {
      const int64_t pixels = models::smallest_feature_map(model->options(), size);
      bool refused = false;
      try {
        model->forward(torch::randn({1, 3, size, size}));
      } catch (const c10::Error& e) {
        refused = true;
        EXPECT_NE(std::string(e.what()).find("Expected more than 1 value per channel"),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(refused, pixels == 1) << "stem " << static_cast<int>(stem) << ", size " << size;
      EXPECT_EQ(model->forward(torch::randn({2, 3, size, size})).size(0), 2);
      EXPECT_EQ(models::smallest_trainable_batch(model->options(), size), pixels == 1 ? 2 : 1);
    }
  }
}

// What a step with every block recomputed keeps through its forward: each block's input, counted
// from the architecture alone, against the inputs the model's own blocks receive, for every depth,
// both stems, at sizes around each halving; and one hand count.
TEST(ResNet, TheBlocksInputsAreCountedAsTheBlocksReceiveThem) {
  EXPECT_EQ(models::block_input_elements(models::ResNetOptions(18), 32),
            3 * 64 * 32 * 32 + 2 * 128 * 16 * 16 + 2 * 256 * 8 * 8 + 512 * 4 * 4);
  for (const int64_t depth : models::supported_depths()) {
    for (auto stem : {models::Stem::Cifar, models::Stem::ImageNet}) {
      auto model = make(depth, stem, 10);
      int64_t received = 0;
      const auto sizes = std::vector<int64_t>(model->blocks().size(), 1);
      model->set_segments(sizes, [&](const models::Segment& segment, const torch::Tensor& x) {
        received += x.numel() / x.size(0);
        return segment.forward(x);
      });
      torch::NoGradGuard no_grad;
      model->eval();
      for (const int64_t size : {9, 17, 32, 33}) {
        received = 0;
        model->forward(torch::zeros({1, 3, size, size}));
        EXPECT_EQ(models::block_input_elements(model->options(), size), received)
            << "ResNet-" << depth << ", stem " << static_cast<int>(stem) << ", size " << size;
      }
    }
  }
}

TEST(ResNet, ParameterNamesFollowTorchvision) {
  auto model = make(50, models::Stem::ImageNet, 1000);
  auto params = model->named_parameters();
  for (const char* name :
       {"conv1.weight", "bn1.weight", "layer1.0.conv3.weight", "layer1.0.downsample.0.weight",
        "layer1.0.downsample.1.bias", "layer4.2.bn3.weight", "fc.weight", "fc.bias"}) {
    EXPECT_NE(params.find(name), nullptr) << name;
  }
  EXPECT_EQ(params["layer2.0.conv2.weight"].sizes(), torch::IntArrayRef({128, 128, 3, 3}));
  EXPECT_EQ(model->named_buffers().size(), 53u * 3);  // 53 BN layers: mean, var, count
}

TEST(ResNet, BlocksAreListedInForwardOrder) {
  EXPECT_EQ(make(18, models::Stem::Cifar, 10)->blocks().size(), 8u);
  EXPECT_EQ(make(50, models::Stem::Cifar, 10)->blocks().size(), 16u);
  EXPECT_EQ(make(152, models::Stem::Cifar, 10)->blocks().size(), 50u);
}

TEST(ResNet, TorchvisionInitialisation) {
  auto model = make(50, models::Stem::Cifar, 10);
  auto params = model->named_parameters();
  // Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (out_channels * k * k)).
  auto w = params["layer3.1.conv2.weight"];  // 256 x 256 x 3 x 3
  EXPECT_NEAR(w.std().item<double>(), std::sqrt(2.0 / (256 * 9)), 0.002);
  EXPECT_TRUE(params["layer3.1.bn3.weight"].eq(1).all().item<bool>());
  EXPECT_TRUE(params["layer3.1.bn3.bias"].eq(0).all().item<bool>());
  const double bound = 1.0 / std::sqrt(2048.0);
  EXPECT_LE(params["fc.weight"].abs().max().item<double>(), bound);
}

TEST(ResNet, ZeroInitResidualZeroesTheLastNormOfEveryBlock) {
  for (int64_t depth : {18, 50}) {
    auto model =
        models::ResNet(models::ResNetOptions(depth).zero_init_residual(true).num_classes(10));
    auto params = model->named_parameters();
    const std::string last = depth == 18 ? "bn2" : "bn3";
    EXPECT_TRUE(params["layer1.0." + last + ".weight"].eq(0).all().item<bool>());
    EXPECT_TRUE(params["layer4.1." + last + ".weight"].eq(0).all().item<bool>());
    EXPECT_TRUE(params["layer4.1.bn1.weight"].eq(1).all().item<bool>());
  }
}

TEST(ResNet, SeededConstructionIsReproducible) {
  torch::manual_seed(3);
  auto a = make(18, models::Stem::Cifar, 10);
  torch::manual_seed(3);
  auto b = make(18, models::Stem::Cifar, 10);
  EXPECT_TRUE(a->named_parameters()["layer2.1.conv1.weight"].equal(
      b->named_parameters()["layer2.1.conv1.weight"]));
}

TEST(ResNet, ChannelsLastGivesTheSameOutputsAndGradients) {
  torch::manual_seed(1);
  auto plain = make(18, models::Stem::Cifar, 10);
  auto nhwc = make(18, models::Stem::Cifar, 10);
  // Eval mode: BatchNorm on a 4-image batch would amplify the layouts' rounding differences.
  plain->eval();
  nhwc->eval();
  const auto x = torch::randn({4, 3, 32, 32});
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : nhwc->named_parameters().pairs())
      p.copy_(plain->named_parameters()[name]);
  }
  models::convert_memory_format(*nhwc, c10::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(nhwc->named_parameters()["layer1.0.conv1.weight"].is_contiguous(
      c10::MemoryFormat::ChannelsLast));
  const auto a = plain->forward(x);
  const auto b = nhwc->forward(x.contiguous(c10::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-4));
  const auto labels = torch::tensor({1, 5, 7, 2}, torch::kInt64);
  torch::nn::functional::cross_entropy(a, labels).backward();
  torch::nn::functional::cross_entropy(b, labels).backward();
  for (const char* name : {"conv1.weight", "layer3.1.conv2.weight", "fc.weight"}) {
    const auto g1 = plain->named_parameters()[name].grad();
    const auto g2 = nhwc->named_parameters()[name].grad();
    // Summation order differs between layouts: compare against the gradient's own scale.
    EXPECT_LT((g1 - g2).abs().max().item<float>(), 1e-3f * g1.abs().max().item<float>()) << name;
  }
}

TEST(ResNet, RejectsUnknownDepthAndNoClasses) {
  EXPECT_THROW(models::ResNet(models::ResNetOptions(20)), std::invalid_argument);
  EXPECT_THROW(models::ResNet(models::ResNetOptions(18).num_classes(0)), std::invalid_argument);
}

TEST(ResNet, SegmentsRunEveryBlockOnceAndMatchThePlainForward) {
  auto model = make(18, models::Stem::Cifar, 10);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 3, 32, 32});
  const auto plain = model->forward(x);
  std::vector<size_t> modules_seen;
  model->set_segments({3, 5}, [&](const models::Segment& segment, const torch::Tensor& input) {
    modules_seen.push_back(segment.modules.size());
    return segment.forward(input);
  });
  EXPECT_TRUE(model->forward(x).equal(plain));
  EXPECT_EQ(modules_seen, (std::vector<size_t>{3, 5}));
  EXPECT_EQ(model->stage_sizes(), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_THROW(model->set_segments({3, 4}, nullptr), std::invalid_argument);
  model->set_segments({}, nullptr);
  EXPECT_TRUE(model->forward(x).equal(plain));
}

}  // namespace
