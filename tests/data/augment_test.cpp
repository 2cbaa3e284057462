#include "data/augment.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

torch::Tensor sample_images(int64_t batch) {
  return torch::randint(1, 256, {batch, 3, 32, 32}, torch::TensorOptions(torch::kUInt8));
}

data::AugmentParams fixed(std::vector<int64_t> y, std::vector<int64_t> x, std::vector<bool> flip) {
  std::vector<int64_t> flips(flip.begin(), flip.end());
  return {torch::tensor(y), torch::tensor(x), torch::tensor(flips).to(torch::kBool)};
}

TEST(CropAndFlip, CentredCropWithoutFlipIsTheIdentity) {
  auto images = sample_images(3);
  auto out = data::crop_and_flip(images, fixed({4, 4, 4}, {4, 4, 4}, {false, false, false}), 4);
  EXPECT_EQ(out.sizes(), images.sizes());
  EXPECT_EQ(out.dtype(), torch::kUInt8);
  EXPECT_TRUE(out.equal(images));
}

TEST(CropAndFlip, FlipMirrorsOnlyTheFlaggedImages) {
  auto images = sample_images(2);
  auto out = data::crop_and_flip(images, fixed({4, 4}, {4, 4}, {true, false}), 4);
  EXPECT_TRUE(out[0].equal(images[0].flip({2})));
  EXPECT_TRUE(out[1].equal(images[1]));
}

TEST(CropAndFlip, CornerCropShiftsInZeroPadding) {
  auto images = sample_images(1);
  auto out = data::crop_and_flip(images, fixed({0}, {8}, {false}), 4);
  // Top-right corner of the padded image: 4 zero rows on top, 4 zero columns on the right.
  using torch::indexing::Slice;
  EXPECT_TRUE(out.index({0, Slice(), Slice(0, 4), Slice()}).eq(0).all().item<bool>());
  EXPECT_TRUE(out.index({0, Slice(), Slice(), Slice(28, 32)}).eq(0).all().item<bool>());
  EXPECT_TRUE(out.index({0, Slice(), Slice(4, 32), Slice(0, 28)})
                  .equal(images.index({0, Slice(), Slice(0, 28), Slice(4, 32)})));
}

TEST(CropAndFlip, FlipAppliesToTheCroppedWindow) {
  auto images = sample_images(1);
  auto crop = data::crop_and_flip(images, fixed({2}, {6}, {false}), 4);
  auto crop_flipped = data::crop_and_flip(images, fixed({2}, {6}, {true}), 4);
  EXPECT_TRUE(crop_flipped.equal(crop.flip({3})));
}

TEST(RandomParams, SameSeedSameChoicesAndRangesRespected) {
  auto g1 = at::make_generator<at::CPUGeneratorImpl>(7);
  auto g2 = at::make_generator<at::CPUGeneratorImpl>(7);
  auto g3 = at::make_generator<at::CPUGeneratorImpl>(8);
  auto a = data::random_augment_params(4096, 4, g1);
  auto b = data::random_augment_params(4096, 4, g2);
  auto c = data::random_augment_params(4096, 4, g3);
  EXPECT_TRUE(a.offset_y.equal(b.offset_y) && a.offset_x.equal(b.offset_x) && a.flip.equal(b.flip));
  EXPECT_FALSE(a.offset_x.equal(c.offset_x));
  EXPECT_EQ(a.offset_y.min().item<int64_t>(), 0);
  EXPECT_EQ(a.offset_y.max().item<int64_t>(), 8);
  const double flipped = a.flip.to(torch::kFloat32).mean().item<double>();
  EXPECT_GT(flipped, 0.45);
  EXPECT_LT(flipped, 0.55);
}

TEST(Normalizer, UsesCifarChannelStatistics) {
  // An image whose channels sit exactly at the CIFAR-10 means maps to ~0; +std*255 maps to ~1.
  auto images = torch::empty({1, 3, 2, 2}, torch::kUInt8);
  images[0][0].fill_(125);  // 0.4914 * 255 = 125.3
  images[0][1].fill_(186);  // (0.4822 + 0.2435) * 255 = 185.05
  images[0][2].fill_(0);
  auto out = data::Normalizer()(images);
  EXPECT_EQ(out.dtype(), torch::kFloat32);
  EXPECT_NEAR(out[0][0][0][0].item<float>(), (125 / 255.0 - 0.4914) / 0.2470, 1e-5);
  EXPECT_NEAR(out[0][1][1][1].item<float>(), (186 / 255.0 - 0.4822) / 0.2435, 1e-5);
  EXPECT_NEAR(out[0][2][0][1].item<float>(), -0.4465 / 0.2616, 1e-5);
}

TEST(Normalizer, HonoursChannelsLast) {
  auto out = data::Normalizer(torch::kCPU, c10::MemoryFormat::ChannelsLast)(sample_images(2));
  EXPECT_TRUE(out.is_contiguous(c10::MemoryFormat::ChannelsLast));
}

// Bilinear with half-pixel centres (torchvision's Resize on tensors): a flat image stays flat, a
// 2x upscale of [0, 1] gives [0, 0.25, 0.75, 1], and the size of the images themselves is no copy.
TEST(ResizeImages, BilinearWithHalfPixelCentresInTheLayoutAsked) {
  const auto flat = torch::full({2, 3, 32, 32}, 0.5f);
  const auto big = data::resize_images(flat, 224, c10::MemoryFormat::ChannelsLast);
  EXPECT_EQ(big.sizes(), torch::IntArrayRef({2, 3, 224, 224}));
  EXPECT_TRUE(big.is_contiguous(c10::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::allclose(big, torch::full_like(big, 0.5f)));
  const auto ramp =
      torch::tensor({0.0f, 1.0f}).view({1, 1, 1, 2}).expand({1, 1, 2, 2}).contiguous();
  const auto twice = data::resize_images(ramp, 4, c10::MemoryFormat::Contiguous);
  EXPECT_TRUE(torch::allclose(twice[0][0][0], torch::tensor({0.0f, 0.25f, 0.75f, 1.0f}))) << twice;
  EXPECT_TRUE(data::resize_images(flat, 32, c10::MemoryFormat::Contiguous).is_same(flat));
  EXPECT_TRUE(data::resize_images(flat, 0, c10::MemoryFormat::Contiguous).is_same(flat));
}

}  // namespace
