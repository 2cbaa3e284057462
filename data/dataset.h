// Where a split comes from: the one place that maps data options to a reader. The loader and
// the trainer only ever see the resulting Split.
#pragma once

#include <torch/arg.h>

#include <string>

#include "data/split.h"

namespace data {

enum class Source {
  Auto,       // binary batches if present under root, else image folders
  Binary,     // <root>/cifar-10-batches-bin/*.bin or <root>/*.bin
  Images,     // <root>/{train,test}/<class>/<image>
  Synthetic,  // random images and labels, no files (benchmarks, tests)
};

enum class SplitName { Train, Test };

struct DataOptions {
  TORCH_ARG(Source, source) = Source::Auto;
  TORCH_ARG(std::string, root) = "datasets/cifar10";
  TORCH_ARG(int64_t, train_limit) = 0;  // 0 = the whole split
  TORCH_ARG(int64_t, test_limit) = 0;
  TORCH_ARG(int64_t, synthetic_train_size) = 50000;
  TORCH_ARG(int64_t, synthetic_test_size) = 10000;
  TORCH_ARG(uint64_t, synthetic_seed) = 0;
};

// Loads (decodes) one split according to `options`. Throws DataError with a one-line message
// naming the file or folder at fault and, when nothing is found, how to get the data.
Split load_split(const DataOptions& options, SplitName which);

// How many samples load_split(options, which) gives, counted without decoding (the binary files'
// sizes, the image folder's listing); the same DataError where the data is missing.
int64_t split_size(const DataOptions& options, SplitName which);

// Both splits' sizes (split_size), counted for `why`: a DataError then reads "<why>: <the data's
// own error>".
struct SplitSizes {
  int64_t train = 0, test = 0;
};
SplitSizes split_sizes(const DataOptions& options, const std::string& why);

// Which concrete source `Auto` resolves to for this root (Binary or Images); throws DataError
// when the root holds neither.
Source resolve_source(const DataOptions& options);

// Random uint8 images and uniformly random labels.
Split make_synthetic(int64_t size, uint64_t seed);

}  // namespace data
