// A decoded CIFAR split: what every data source (binary batches, image folders, synthetic)
// produces and what the loader consumes. Decoded once; augmentation happens per batch later.
#pragma once

#include <torch/types.h>

#include <stdexcept>
#include <string>

namespace data {

inline constexpr int64_t kImageSide = 32;
inline constexpr int64_t kChannels = 3;
inline constexpr int64_t kNumClasses = 10;

// CIFAR-10 training-set channel statistics (R, G, B) of pixel values scaled to [0,1]: what the
// normalisation subtracts and divides by.
inline constexpr float kChannelMean[3] = {0.4914f, 0.4822f, 0.4465f};
inline constexpr float kChannelStd[3] = {0.2470f, 0.2435f, 0.2616f};

struct Split {
  torch::Tensor images;  // uint8 [N, 3, 32, 32], RGB, CHW
  torch::Tensor labels;  // int64 [N], class indices
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// Bad or missing data files. The message names the file (and record or image) at fault.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The first `limit` samples of `split` (all of them when limit is 0 or >= size).
Split take_first(const Split& split, int64_t limit);

}  // namespace data
