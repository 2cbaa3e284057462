#include "data/dataset.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <iterator>

#include "build_config.h"
#include "data/cifar10_binary.h"
#include "data/image_folder.h"

namespace data {

namespace fs = std::filesystem;

namespace {

// The official tarball unpacks to cifar-10-batches-bin/; a root holding the .bin files directly
// is accepted as well.
fs::path binary_dir(const fs::path& root) {
  const auto nested = root / "cifar-10-batches-bin";
  return fs::is_directory(nested) ? nested : root;
}

// The command as one copies it: the project's script by its path, the root one shell word (in
// single quotes, as training/platform/errors.h's shell_word, which this layer cannot include).
std::string how_to_get_data(const fs::path& root) {
  const auto word = [](const std::string& text) {
    std::string quoted = "'";
    for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted + "'";
  };
  // --root=VALUE: a root that starts with '-' is its value, not another option.
  return "run `" + word(TRAIN_SCRIPTS_DIR "/get-data.sh") + " --root=" + word(root.string()) +
         "` to download or unpack CIFAR-10";
}

// The binary batch files of a split, the first known to exist.
std::vector<fs::path> split_files(const fs::path& root, bool train) {
  auto files = binary_batch_files(binary_dir(root), train);
  if (!fs::exists(files.front())) {
    throw DataError(files.front().string() + ": file not found; " + how_to_get_data(root));
  }
  return files;
}

// The image folder of a split, known to exist with the other split's class folders.
fs::path split_folder(const fs::path& root, bool train) {
  const auto dir = root / (train ? "train" : "test");
  if (!fs::is_directory(dir)) {
    throw DataError(dir.string() + ": folder not found; " + how_to_get_data(root));
  }
  check_same_class_folders(root);
  return dir;
}

}  // namespace

Source resolve_source(const DataOptions& options) {
  if (options.source() == Source::Synthetic) return Source::Synthetic;
  const fs::path root = options.root();
  std::error_code ec;
  // A file as the root would otherwise read as "root/train: folder not found".
  if (fs::exists(root, ec) && !fs::is_directory(root, ec)) {
    throw DataError(root.string() +
                    ": is not a folder; data.root names the folder that holds CIFAR-10 "
                    "(cifar-10-batches-bin/ or train/ and test/)");
  }
  if (options.source() != Source::Auto) return options.source();
  if (fs::exists(binary_dir(root) / "test_batch.bin", ec) ||
      fs::exists(binary_dir(root) / "data_batch_1.bin", ec)) {
    return Source::Binary;
  }
  if (fs::is_directory(root / "train", ec) || fs::is_directory(root / "test", ec)) {
    return Source::Images;
  }
  throw DataError(root.string() +
                  ": no CIFAR-10 found (looked for cifar-10-batches-bin/*.bin and "
                  "train/<class>/ folders); " +
                  how_to_get_data(root));
}

Split load_split(const DataOptions& options, SplitName which) {
  const bool train = which == SplitName::Train;
  const int64_t limit = train ? options.train_limit() : options.test_limit();
  const fs::path root = options.root();
  switch (resolve_source(options)) {
    case Source::Synthetic: {
      // Train and test get different streams so a test set never mirrors the training set.
      return make_synthetic(split_size(options, which),
                            options.synthetic_seed() * 2 + (train ? 0 : 1));
    }
    case Source::Binary:
      return read_binary_batches(split_files(root, train), limit);
    case Source::Images:
      return read_image_folder(split_folder(root, train), limit);
    case Source::Auto:
      break;
  }
  throw DataError("unreachable data source");
}

int64_t split_size(const DataOptions& options, SplitName which) {
  const bool train = which == SplitName::Train;
  const int64_t limit = train ? options.train_limit() : options.test_limit();
  const fs::path root = options.root();
  int64_t size = 0;
  switch (resolve_source(options)) {
    case Source::Synthetic:
      size = train ? options.synthetic_train_size() : options.synthetic_test_size();
      break;
    case Source::Binary:
      return count_binary_records(split_files(root, train), limit);
    case Source::Images:
      size = static_cast<int64_t>(list_image_folder(split_folder(root, train)).size());
      break;
    case Source::Auto:
      throw DataError("unreachable data source");
  }
  return limit > 0 ? std::min(limit, size) : size;
}

SplitSizes split_sizes(const DataOptions& options, const std::string& why) {
  try {
    return {split_size(options, SplitName::Train), split_size(options, SplitName::Test)};
  } catch (const DataError& e) {
    throw DataError(why + ": " + e.what());
  }
}

Split make_synthetic(int64_t size, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randint(0, 256, {size, kChannels, kImageSide, kImageSide}, gen,
                         torch::TensorOptions(torch::kUInt8)),
          torch::randint(0, kNumClasses, {size}, gen, torch::TensorOptions(torch::kInt64))};
}

}  // namespace data
