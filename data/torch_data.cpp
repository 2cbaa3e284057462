#include "data/torch_data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "data/augment.h"

namespace data {

namespace transforms = torch::data::transforms;
namespace datasets = torch::data::datasets;

Cifar10Dataset::Cifar10Dataset(const std::string& root, SplitName which)
    : Cifar10Dataset(DataOptions().root(root), which) {}

Cifar10Dataset::Cifar10Dataset(const DataOptions& options, SplitName which)
    : split_(load_split(options, which)) {}

Cifar10Dataset::Cifar10Dataset(Split split) : split_(std::move(split)) {}

torch::data::Example<> Cifar10Dataset::get(size_t index) {
  const auto i = static_cast<int64_t>(index);
  return {split_.images[i].to(torch::kFloat32).div_(255), split_.labels[i]};
}

std::optional<size_t> Cifar10Dataset::size() const {
  return static_cast<size_t>(split_.size());
}

transforms::Normalize<> cifar10_normalize() {
  return transforms::Normalize<>({kChannelMean[0], kChannelMean[1], kChannelMean[2]},
                                 {kChannelStd[0], kChannelStd[1], kChannelStd[2]});
}

RandomCropFlip::RandomCropFlip(uint64_t seed, int64_t padding, bool enabled)
    : generator_(std::make_shared<at::Generator>(at::make_generator<at::CPUGeneratorImpl>(seed))),
      mutex_(std::make_shared<std::mutex>()),
      padding_(padding),
      enabled_(enabled) {}

torch::Tensor RandomCropFlip::operator()(torch::Tensor image) {
  if (!enabled_) return image;
  AugmentParams params;
  {
    std::lock_guard<std::mutex> lock(*mutex_);  // one draw at a time across the workers
    params = random_augment_params(1, padding_, *generator_);
  }
  // The batched augmentation on a batch of one: the same crops and flips, per example.
  return crop_and_flip(image.unsqueeze(0), params, padding_).squeeze(0);
}

EpochSampler::EpochSampler(int64_t size, LoaderOptions options)
    : size_(size), options_(std::move(options)) {}

void EpochSampler::reset(std::optional<size_t> new_size) {
  if (new_size) size_ = static_cast<int64_t>(*new_size);
  const auto order = epoch_order(size_, epoch_, options_);
  const auto* begin = order.data_ptr<int64_t>();
  indices_.assign(begin, begin + order.numel());
  position_ = 0;
}

std::optional<std::vector<size_t>> EpochSampler::next(size_t batch_size) {
  if (position_ >= indices_.size()) return std::nullopt;
  const size_t count = std::min(batch_size, indices_.size() - position_);
  std::vector<size_t> batch(indices_.begin() + static_cast<std::ptrdiff_t>(position_),
                            indices_.begin() + static_cast<std::ptrdiff_t>(position_ + count));
  position_ += count;
  return batch;
}

void EpochSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", torch::tensor(epoch_, torch::kInt64), /*is_buffer=*/true);
  archive.write("position", torch::tensor(static_cast<int64_t>(position_), torch::kInt64),
                /*is_buffer=*/true);
}

void EpochSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor epoch, position;
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  epoch_ = epoch.item<int64_t>();
  reset();
  position_ = static_cast<size_t>(position.item<int64_t>());
}

// The dataset with its transforms, and the current epoch's LibTorch loader and position in it.
struct TorchDataLoader::Pipeline {
  using Augmented = datasets::MapDataset<Cifar10Dataset, RandomCropFlip>;
  using Normalized = datasets::MapDataset<Augmented, transforms::Normalize<>>;
  using Stacked = datasets::MapDataset<Normalized, transforms::Stack<>>;
  using Loader = torch::data::StatelessDataLoader<Stacked, EpochSampler>;

  Split split;
  std::unique_ptr<Loader> loader;
  std::optional<torch::data::Iterator<torch::data::Example<>>> position;
};

TorchDataLoader::TorchDataLoader(Split split, LoaderOptions options, int64_t workers)
    : size_(split.size()),
      options_(std::move(options)),
      workers_(workers),
      pipeline_(std::make_unique<Pipeline>()) {
  TORCH_CHECK(options_.batch_size() > 0, "batch_size must be positive");
  pipeline_->split = std::move(split);
}

TorchDataLoader::~TorchDataLoader() = default;

int64_t TorchDataLoader::shard_size() const {
  return shard_length(size_, options_);
}

void TorchDataLoader::stop() {
  pipeline_->position.reset();
  pipeline_->loader.reset();  // joins the workers, drops their batches
}

Ahead TorchDataLoader::ahead() const {
  // Its workers make and stack batches in host memory; only the consumer's batch goes to another
  // device (in next()).
  if (!options_.device().is_cpu()) return {};
  return {workers_, workers_};
}

int64_t TorchDataLoader::batches_per_epoch() const {
  return batch_count(size_, options_);
}

void TorchDataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  TORCH_CHECK(first_batch == 0,
              "data.loader: torch_data cannot start an epoch in the middle (its crops and flips "
              "are not a function of the batch)");
  pipeline_->position.reset();
  pipeline_->loader.reset();  // joins the previous epoch's workers
  next_batch_ = 0;
  // A new generator per epoch, seeded by (seed, epoch): without workers, a run (and a resume at
  // an epoch boundary) repeats exactly.
  auto dataset = Cifar10Dataset(pipeline_->split)
                     .map(RandomCropFlip(mix_seed(options_.seed(), epoch, ~1ULL),
                                         options_.padding(), options_.augment()))
                     .map(cifar10_normalize())
                     .map(transforms::Stack<>());
  EpochSampler sampler(size_, options_);
  sampler.set_epoch(epoch);
  pipeline_->loader =
      torch::data::make_data_loader(std::move(dataset), std::move(sampler),
                                    torch::data::DataLoaderOptions()
                                        .batch_size(static_cast<size_t>(options_.batch_size()))
                                        .workers(static_cast<size_t>(workers_))
                                        .drop_last(options_.drop_last()));
  pipeline_->position = pipeline_->loader->begin();
}

std::optional<Batch> TorchDataLoader::next() {
  if (!pipeline_->position || *pipeline_->position == pipeline_->loader->end()) return std::nullopt;
  torch::data::Example<> example = **pipeline_->position;
  ++*pipeline_->position;
  const auto device = options_.device();
  auto images = example.data.to(device, /*non_blocking=*/true).contiguous(options_.memory_format());
  return Batch{resize_images(images, options_.image_size(), options_.memory_format()),
               example.target.to(device, /*non_blocking=*/true), next_batch_++};
}

}  // namespace data
