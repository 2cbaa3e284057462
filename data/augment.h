// Batched CIFAR augmentation as tensor ops on whatever device the batch lives on: random crop
// with zero padding and horizontal flip done as one gather per axis, then normalisation and, where
// asked, a resize.
#pragma once

#include <torch/types.h>

namespace data {

// Per-image random choices for one batch, drawn on the CPU so they are reproducible from a seed
// whatever the training device.
struct AugmentParams {
  torch::Tensor offset_y;  // int64 [B], top edge of the crop in the padded image, 0..2*padding
  torch::Tensor offset_x;  // int64 [B], left edge
  torch::Tensor flip;      // bool [B], mirror horizontally
};

AugmentParams random_augment_params(int64_t batch, int64_t padding, torch::Generator& generator);

// Pads uint8 images [B,C,H,W] by `padding` zeros on each side, crops HxW at the given offsets and
// mirrors the images whose flip is set. Output: uint8 [B,C,H,W] on the input's device.
torch::Tensor crop_and_flip(const torch::Tensor& images, const AugmentParams& params,
                            int64_t padding);

// uint8 [B,3,H,W] -> float32 normalised with CIFAR-10's per-channel mean and std, laid out in
// `memory_format`. Holds the statistics on the device so the hot path copies nothing.
class Normalizer {
 public:
  explicit Normalizer(torch::Device device = torch::kCPU,
                      c10::MemoryFormat memory_format = c10::MemoryFormat::Contiguous);
  torch::Tensor operator()(const torch::Tensor& images) const;

 private:
  torch::Tensor shift_, scale_;  // [1,3,1,1] float32: mean*255 and 1/(std*255)
  c10::MemoryFormat memory_format_;
};

// Float images [B,C,H,W] resized to [B,C,size,size] (bilinear, half-pixel centres: torchvision's
// Resize on tensors), laid out in `memory_format`; the images themselves where size is 0 or
// already theirs. The step's input at the resolution an ImageNet-style ResNet-50 trains at (224).
torch::Tensor resize_images(const torch::Tensor& images, int64_t size,
                            c10::MemoryFormat memory_format);

}  // namespace data
