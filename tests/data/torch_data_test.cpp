// The CIFAR-10 split as a torch::data dataset, and the trainer's torch_data loader, against the
// split and the batched loader.
#include "data/torch_data.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "test_support.h"

namespace {

namespace fs = std::filesystem;

data::Split labelled_split(int64_t n) {
  auto split = data::make_synthetic(n, 3);
  split.labels = torch::arange(n, torch::kInt64) % 10;
  return split;
}

TEST(Cifar10Dataset, YieldsTheSplitsImagesAndLabels) {
  const auto split = labelled_split(37);
  data::Cifar10Dataset dataset(split);
  ASSERT_EQ(dataset.size(), std::optional<size_t>(37));
  for (size_t i : {size_t{0}, size_t{36}}) {
    const auto example = dataset.get(i);
    EXPECT_TRUE(torch::equal(example.data,
                             split.images[static_cast<int64_t>(i)].to(torch::kFloat32) / 255));
    EXPECT_EQ(example.target.item<int64_t>(),
              split.labels[static_cast<int64_t>(i)].item<int64_t>());
    EXPECT_EQ(example.data.sizes(), (std::vector<int64_t>{3, 32, 32}));
  }
}

// Without shuffling or augmentation, LibTorch's loader over the dataset gives the batched
// loader's batches: the same images (normalised alike, up to float rounding), labels and order.
// At the images' own size and resized (data.image_size: 64 here) alike.
TEST(TorchDataLoader, GivesTheBatchedLoadersBatchesWithoutShuffling) {
  const auto split = labelled_split(70);
  for (const int64_t image_size : {0, 64}) {
    const auto options = data::LoaderOptions()
                             .batch_size(16)
                             .shuffle(false)
                             .augment(false)
                             .drop_last(false)
                             .prefetch(0)
                             .image_size(image_size);
    data::BatchLoader batched(split, options);
    data::TorchDataLoader torch_data(split, options, /*workers=*/0);
    ASSERT_EQ(torch_data.batches_per_epoch(), batched.batches_per_epoch());
    batched.start_epoch(1);
    torch_data.start_epoch(1);
    int64_t batches = 0;
    while (auto expected = batched.next()) {
      const auto got = torch_data.next();
      ASSERT_TRUE(got.has_value()) << "batch " << batches;
      EXPECT_EQ(got->images.size(3), image_size == 0 ? 32 : image_size);
      EXPECT_TRUE(torch::equal(got->labels, expected->labels)) << "batch " << batches;
      EXPECT_TRUE(torch::allclose(got->images, expected->images, 1e-5, 1e-5))
          << "batch " << batches;
      ++batches;
    }
    EXPECT_FALSE(torch_data.next().has_value());
    EXPECT_EQ(batches, 5);  // 4 of 16 and the partial last one of 6
  }
}

// With the LibTorch loader's own sampler as a user would write it: make_data_loader over
// the mapped dataset, sequential, gives the same batches too.
TEST(Cifar10Dataset, PlugsIntoMakeDataLoader) {
  const auto split = labelled_split(48);
  auto dataset = data::Cifar10Dataset(split)
                     .map(data::cifar10_normalize())
                     .map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset), 16);
  data::BatchLoader batched(
      split, data::LoaderOptions().batch_size(16).shuffle(false).augment(false).prefetch(0));
  batched.start_epoch(1);
  int64_t batches = 0;
  for (auto& batch : *loader) {
    const auto expected = batched.next();
    ASSERT_TRUE(expected.has_value());
    EXPECT_TRUE(torch::equal(batch.target, expected->labels));
    EXPECT_TRUE(torch::allclose(batch.data, expected->images, 1e-5, 1e-5));
    ++batches;
  }
  EXPECT_EQ(batches, 3);
}

TEST(TorchDataLoader, ShufflesLikeTheBatchedLoaderAndAugmentsReproduciblyWithoutWorkers) {
  const auto split = labelled_split(64);
  const auto options = data::LoaderOptions().batch_size(8).seed(5).prefetch(0);
  data::BatchLoader batched(split, options);
  data::TorchDataLoader a(split, options, 0), b(split, options, 0);
  for (int64_t epoch : {1, 2}) {
    batched.start_epoch(epoch);
    a.start_epoch(epoch);
    b.start_epoch(epoch);
    while (auto expected = batched.next()) {
      const auto got = a.next(), again = b.next();
      ASSERT_TRUE(got && again);
      EXPECT_TRUE(torch::equal(got->labels, expected->labels));  // the same epoch order
      EXPECT_TRUE(torch::equal(got->images, again->images));     // the same crops and flips
    }
  }
}

TEST(TorchDataLoader, WorkersDeliverTheWholeEpoch) {
  const auto split = labelled_split(100);
  data::TorchDataLoader loader(split, data::LoaderOptions().batch_size(10).seed(2), /*workers=*/2);
  loader.start_epoch(1);
  std::vector<torch::Tensor> labels;
  while (auto batch = loader.next()) labels.push_back(batch->labels);
  EXPECT_EQ(torch::cat(labels).numel(), 100);
}

TEST(TorchDataLoader, AStoppedEpochGivesNothingAndItsWorkersAreJoined) {
  const auto split = labelled_split(100);
  data::TorchDataLoader loader(split, data::LoaderOptions().batch_size(10).seed(2), /*workers=*/2);
  EXPECT_EQ(loader.ahead().ready, 2);
  loader.start_epoch(1);
  ASSERT_TRUE(loader.next().has_value());
  loader.stop();
  EXPECT_FALSE(loader.next().has_value());
  loader.start_epoch(2);
  int64_t images = 0;
  while (auto batch = loader.next()) images += batch->labels.size(0);
  EXPECT_EQ(images, 100);
}

TEST(Cifar10Dataset, BadRootsGiveTheSameOneLineErrors) {
  test_support::TempDir dir;
  std::string from_split, from_dataset;
  try {
    data::load_split(data::DataOptions().root(dir.path().string()), data::SplitName::Train);
  } catch (const data::DataError& e) {
    from_split = e.what();
  }
  try {
    data::Cifar10Dataset(dir.path().string(), data::SplitName::Train);
  } catch (const data::DataError& e) {
    from_dataset = e.what();
  }
  EXPECT_FALSE(from_dataset.empty());
  EXPECT_EQ(from_dataset, from_split);
  EXPECT_NE(from_dataset.find("no CIFAR-10 found"), std::string::npos) << from_dataset;
}

}  // namespace
