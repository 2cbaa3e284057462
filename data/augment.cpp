#include "data/augment.h"

#include <torch/torch.h>

#include "data/split.h"

namespace data {

AugmentParams random_augment_params(int64_t batch, int64_t padding, torch::Generator& generator) {
  auto int64 = torch::TensorOptions(torch::kInt64);
  return {torch::randint(0, 2 * padding + 1, {batch}, generator, int64),
          torch::randint(0, 2 * padding + 1, {batch}, generator, int64),
          torch::randint(0, 2, {batch}, generator, int64).to(torch::kBool)};
}

torch::Tensor crop_and_flip(const torch::Tensor& images, const AugmentParams& params,
                            int64_t padding) {
  const auto device = images.device();
  const int64_t b = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  auto padded = torch::constant_pad_nd(images, {padding, padding, padding, padding}, 0);

  auto offsets_y = params.offset_y.to(device, /*non_blocking=*/true);
  auto offsets_x = params.offset_x.to(device, /*non_blocking=*/true);
  auto flip = params.flip.to(device, /*non_blocking=*/true);
  auto along_h = torch::arange(h, torch::TensorOptions(torch::kInt64).device(device));
  auto along_w = torch::arange(w, torch::TensorOptions(torch::kInt64).device(device));

  // Rows first: [B,C,H+2p,W+2p] -> [B,C,H,W+2p].
  auto rows =
      (offsets_y.unsqueeze(1) + along_h).view({b, 1, h, 1}).expand({b, c, h, w + 2 * padding});
  auto cropped = padded.gather(2, rows);
  // Then columns, read right to left for the mirrored images: -> [B,C,H,W].
  auto forward_cols = along_w.unsqueeze(0).expand({b, w});
  auto cols =
      offsets_x.unsqueeze(1) + torch::where(flip.unsqueeze(1), forward_cols.flip(1), forward_cols);
  return cropped.gather(3, cols.view({b, 1, 1, w}).expand({b, c, h, w}));
}

Normalizer::Normalizer(torch::Device device, c10::MemoryFormat memory_format)
    : memory_format_(memory_format) {
  const auto& mean = kChannelMean;
  const auto& std = kChannelStd;
  shift_ = torch::tensor({mean[0] * 255, mean[1] * 255, mean[2] * 255}).view({1, 3, 1, 1});
  scale_ = torch::tensor({1 / (std[0] * 255), 1 / (std[1] * 255), 1 / (std[2] * 255)})
               .view({1, 3, 1, 1});
  shift_ = shift_.to(device);
  scale_ = scale_.to(device);
}

torch::Tensor Normalizer::operator()(const torch::Tensor& images) const {
  // One float batch, made in its layout and normalised in place: the loader's peak beside the
  // step is this batch and its uint8 source, not three float temporaries.
  auto out = images.to(torch::TensorOptions(torch::kFloat32), /*non_blocking=*/false,
                       /*copy=*/true, memory_format_);
  return out.sub_(shift_).mul_(scale_);
}

torch::Tensor resize_images(const torch::Tensor& images, int64_t size,
                            c10::MemoryFormat memory_format) {
  if (size == 0 || (images.size(2) == size && images.size(3) == size)) return images;
  namespace F = torch::nn::functional;
  return F::interpolate(images, F::InterpolateFuncOptions()
                                    .size(std::vector<int64_t>{size, size})
                                    .mode(torch::kBilinear)
                                    .align_corners(false))
      .contiguous(memory_format);
}

}  // namespace data
