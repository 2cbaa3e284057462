// CIFAR-10 as a LibTorch `torch::data` dataset, for programs built on LibTorch's own loader:
//
//   auto dataset = data::Cifar10Dataset("datasets/cifar10", data::SplitName::Train)
//                      .map(data::RandomCropFlip(/*seed=*/0))
//                      .map(data::cifar10_normalize())
//                      .map(torch::data::transforms::Stack<>());
//   auto loader = torch::data::make_data_loader(std::move(dataset), /*batch_size=*/128);
//   for (auto& batch : *loader) { /* batch.data [128,3,32,32], batch.target [128] */ }
//
// The same readers as `train` (binary batches, image folders, synthetic), the same one-line
// data::DataError messages. And TorchDataLoader, the trainer's `data.loader: torch_data`: that
// pipeline behind the trainer's Loader interface.
#pragma once

#include <torch/data.h>

#include <memory>
#include <mutex>

#include "data/dataset.h"
#include "data/loader.h"

namespace data {

// One example per image: data float32 [3,32,32] with values in [0,1], target int64 scalar.
class Cifar10Dataset : public torch::data::datasets::Dataset<Cifar10Dataset> {
 public:
  // Reads (decodes) the split; throws DataError naming the file or folder at fault.
  Cifar10Dataset(const std::string& root, SplitName which);
  Cifar10Dataset(const DataOptions& options, SplitName which);
  // Over a split already decoded.
  explicit Cifar10Dataset(Split split);

  torch::data::Example<> get(size_t index) override;
  std::optional<size_t> size() const override;
  const Split& split() const { return split_; }

 private:
  Split split_;
};

// CIFAR-10's channel normalisation (split.h's statistics) as a torch::data transform.
torch::data::transforms::Normalize<> cifar10_normalize();

// Random crop with `padding` zero pixels and a horizontal flip, per example, drawn from a
// generator seeded by `seed` (shared by the copies the loader makes; safe with workers). With
// `enabled` false it passes images through, so augmented and plain pipelines have one type.
class RandomCropFlip : public torch::data::transforms::TensorTransform<> {
 public:
  explicit RandomCropFlip(uint64_t seed, int64_t padding = 4, bool enabled = true);
  torch::Tensor operator()(torch::Tensor image) override;

 private:
  std::shared_ptr<at::Generator> generator_;
  std::shared_ptr<std::mutex> mutex_;
  int64_t padding_;
  bool enabled_;
};

// The samples of one epoch, in epoch_order (loader.h): the same order, shards and seed as the
// batched loader; set_epoch before iterating.
class EpochSampler : public torch::data::samplers::Sampler<> {
 public:
  EpochSampler(int64_t size, LoaderOptions options);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  int64_t size_;
  LoaderOptions options_;
  int64_t epoch_ = 0;
  std::vector<size_t> indices_;
  size_t position_ = 0;
};

// `data.loader: torch_data`: LibTorch's torch::data loader (Cifar10Dataset, RandomCropFlip,
// cifar10_normalize, Stack, EpochSampler) with `workers` worker threads, behind the trainer's
// Loader interface. Same epoch order and shards as BatchLoader; the crops and flips come from the
// transform's generator, so a run is reproducible only without workers, and an epoch cannot be
// restarted in the middle (start_epoch refuses a first_batch > 0).
class TorchDataLoader : public Loader {
 public:
  TorchDataLoader(Split split, LoaderOptions options, int64_t workers);
  ~TorchDataLoader() override;

  int64_t batches_per_epoch() const override;
  int64_t dataset_size() const override { return size_; }
  int64_t shard_size() const override;
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  std::optional<Batch> next() override;
  void stop() override;
  int64_t batch_size() const override { return options_.batch_size(); }
  void set_batch_size(int64_t images) override {
    stop();
    options_.batch_size(images);
  }
  // torch::data keeps 2 x workers batches under way (DataLoaderOptions::max_jobs), at most one in
  // preparation per worker: in host memory, so on the CPU only.
  Ahead ahead() const override;

 private:
  struct Pipeline;
  int64_t size_;
  LoaderOptions options_;
  int64_t workers_;
  std::unique_ptr<Pipeline> pipeline_;
  int64_t next_batch_ = 0;
};

}  // namespace data
