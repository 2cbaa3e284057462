#include "data/loader.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/dataset.h"

namespace {

// Labels 0..n-1 (so each sample is identifiable) and random images.
data::Split numbered_split(int64_t n) {
  auto split = data::make_synthetic(n, 3);
  split.labels = torch::arange(n, torch::kInt64);
  return split;
}

std::vector<data::Batch> whole_epoch(data::BatchLoader& loader, int64_t epoch, int64_t first = 0) {
  loader.start_epoch(epoch, first);
  std::vector<data::Batch> batches;
  while (auto batch = loader.next()) batches.push_back(*batch);
  return batches;
}

TEST(BatchLoader, AnEpochVisitsEverySampleOnceInShuffledOrder) {
  data::BatchLoader loader(numbered_split(100),
                           data::LoaderOptions().batch_size(10).augment(false).seed(1));
  auto batches = whole_epoch(loader, 1);
  ASSERT_EQ(batches.size(), 10u);
  std::vector<torch::Tensor> labels;
  for (const auto& b : batches) labels.push_back(b.labels);
  auto all = torch::cat(labels);
  EXPECT_TRUE(std::get<0>(all.sort()).equal(torch::arange(100, torch::kInt64)));
  EXPECT_FALSE(all.equal(torch::arange(100, torch::kInt64)));  // shuffled
}

TEST(BatchLoader, DropLastAndPartialLastBatch) {
  data::BatchLoader train(numbered_split(25), data::LoaderOptions().batch_size(10).augment(false));
  EXPECT_EQ(train.batches_per_epoch(), 2);
  data::BatchLoader eval(
      numbered_split(25),
      data::LoaderOptions().batch_size(10).augment(false).shuffle(false).drop_last(false));
  auto batches = whole_epoch(eval, 0);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].labels.size(0), 5);
  EXPECT_TRUE(batches[0].labels.equal(torch::arange(10, torch::kInt64)));
}

// Measurements count steps, not epochs: the batches go on into the next epoch, which is started
// (and counted) when the current one ends.
TEST(BatchLoader, BatchesAcrossEpochsStartTheNextEpochAtTheEnd) {
  data::BatchLoader loader(numbered_split(25), data::LoaderOptions().batch_size(10).augment(false));
  int64_t epoch = 1;
  loader.start_epoch(epoch);
  for (int i = 0; i < 5; ++i) {
    const auto batch = data::next_batch_across_epochs(loader, epoch);
    ASSERT_TRUE(batch.has_value()) << i;
    EXPECT_EQ(batch->images.size(0), 10);
    EXPECT_EQ(epoch, 1 + i / 2) << i;  // two whole batches an epoch; the last 5 images dropped
  }
}

TEST(BatchLoader, EpochsDifferButAreReproducible) {
  auto options = data::LoaderOptions().batch_size(16).seed(9);
  data::BatchLoader a(numbered_split(64), options);
  data::BatchLoader b(numbered_split(64), options);
  auto a1 = whole_epoch(a, 1), b1 = whole_epoch(b, 1), a2 = whole_epoch(a, 2);
  for (size_t i = 0; i < a1.size(); ++i) {
    EXPECT_TRUE(a1[i].images.equal(b1[i].images));
    EXPECT_TRUE(a1[i].labels.equal(b1[i].labels));
  }
  EXPECT_FALSE(a1[0].labels.equal(a2[0].labels));
}

TEST(BatchLoader, StartingMidEpochYieldsTheSameRemainingBatches) {
  auto options = data::LoaderOptions().batch_size(8).seed(4);
  data::BatchLoader loader(numbered_split(64), options);
  auto full = whole_epoch(loader, 3);
  auto tail = whole_epoch(loader, 3, 5);
  ASSERT_EQ(tail.size(), 3u);
  for (size_t i = 0; i < tail.size(); ++i) {
    EXPECT_EQ(tail[i].index, full[i + 5].index);
    EXPECT_TRUE(tail[i].images.equal(full[i + 5].images));
  }
}

TEST(BatchLoader, PrefetchingChangesNothingButTiming) {
  data::BatchLoader inline_loader(numbered_split(48),
                                  data::LoaderOptions().batch_size(8).prefetch(0).seed(2));
  data::BatchLoader ahead(numbered_split(48),
                          data::LoaderOptions().batch_size(8).prefetch(3).seed(2));
  auto x = whole_epoch(inline_loader, 1), y = whole_epoch(ahead, 1);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(x[i].images.equal(y[i].images));
}

TEST(BatchLoader, RestartingAnEpochMidwayStopsTheOldProducer) {
  data::BatchLoader loader(numbered_split(64), data::LoaderOptions().batch_size(8).prefetch(2));
  loader.start_epoch(1);
  ASSERT_TRUE(loader.next().has_value());
  auto again = whole_epoch(loader, 1);  // abandons the first pass after one batch
  EXPECT_EQ(again.size(), 8u);
  EXPECT_EQ(again.front().index, 0);
}

// A loader stopped part-way holds nothing and gives nothing until its next epoch (the evaluator's
// probe restarted the test loader instead, whose prefetched batches stayed through training).
TEST(BatchLoader, AStoppedEpochGivesNothingAndANewEpochStartsWhole) {
  for (const int64_t prefetch : {0, 2}) {
    data::BatchLoader loader(numbered_split(64),
                             data::LoaderOptions().batch_size(8).prefetch(prefetch));
    loader.start_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
    loader.stop();
    EXPECT_FALSE(loader.next().has_value()) << "prefetch " << prefetch;
    EXPECT_EQ(whole_epoch(loader, 0).size(), 8u);
  }
}

TEST(BatchLoader, BatchesAreNormalisedFloatImages) {
  data::BatchLoader loader(numbered_split(32), data::LoaderOptions().batch_size(32).augment(true));
  auto batch = whole_epoch(loader, 1).front();
  EXPECT_EQ(batch.images.dtype(), torch::kFloat32);
  EXPECT_EQ(batch.images.sizes(), torch::IntArrayRef({32, 3, 32, 32}));
  EXPECT_LT(batch.images.mean().abs().item<float>(), 1.0f);
}

// data.image_size: the augmented, normalised batch resized on its device, in its layout.
TEST(BatchLoader, BatchesAreResizedToTheImageSizeAsked) {
  data::BatchLoader loader(
      numbered_split(8),
      data::LoaderOptions().batch_size(8).augment(true).image_size(224).memory_format(
          c10::MemoryFormat::ChannelsLast));
  auto batch = whole_epoch(loader, 1).front();
  EXPECT_EQ(batch.images.sizes(), torch::IntArrayRef({8, 3, 224, 224}));
  EXPECT_TRUE(batch.images.is_contiguous(c10::MemoryFormat::ChannelsLast));
  data::BatchLoader stored(numbered_split(8),
                           data::LoaderOptions().batch_size(8).augment(true).image_size(32));
  EXPECT_EQ(whole_epoch(stored, 1).front().images.size(2), 32);
}

TEST(BatchLoader, ProducerErrorsReachTheConsumer) {
  // Fewer images than labels: index_select fails inside the producer thread.
  auto broken = numbered_split(32);
  broken.images = broken.images.narrow(0, 0, 4);
  data::BatchLoader bad(broken, data::LoaderOptions().batch_size(8).shuffle(false).prefetch(2));
  bad.start_epoch(1);
  EXPECT_THROW(
      {
        while (bad.next()) {
        }
      },
      c10::Error);
}

TEST(MixSeed, DistinctTriplesGiveDistinctSeeds) {
  EXPECT_NE(data::mix_seed(1, 2, 3), data::mix_seed(1, 3, 2));
  EXPECT_NE(data::mix_seed(0, 0, 0), data::mix_seed(0, 0, 1));
  EXPECT_EQ(data::mix_seed(5, 6, 7), data::mix_seed(5, 6, 7));
}

// What data.device_resident holds, as the loader's own tensors are sized: both splits and the
// training epoch's order.
TEST(BatchLoader, TheDeviceResidentBytesAreBothSplitsAndTheShardsOrder) {
  const data::Split train = data::make_synthetic(50, 1), test = data::make_synthetic(7, 2);
  const int64_t splits = static_cast<int64_t>(train.images.nbytes() + train.labels.nbytes() +
                                              test.images.nbytes() + test.labels.nbytes());
  const auto options = data::LoaderOptions().batch_size(8).shard_count(2).shard_index(1);
  const auto order = data::epoch_order(train.size(), 1, options);
  EXPECT_EQ(data::device_resident_bytes(50, 7, data::shard_length(50, options)),
            splits + static_cast<int64_t>(order.nbytes()));
}

}  // namespace
