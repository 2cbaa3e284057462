#include "data/loader.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <chrono>
#include <numeric>

namespace data {

uint64_t mix_seed(uint64_t seed, uint64_t epoch, uint64_t batch) {
  auto splitmix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  return splitmix(splitmix(splitmix(seed) ^ epoch) ^ batch);
}

BatchLoader::BatchLoader(Split split, LoaderOptions options)
    : split_(std::move(split)),
      options_(std::move(options)),
      normalize_(options_.device(), options_.memory_format()) {
  TORCH_CHECK(options_.batch_size() > 0, "batch_size must be positive");
  TORCH_CHECK(options_.shard_count() > 0 && options_.shard_index() >= 0 &&
                  options_.shard_index() < options_.shard_count(),
              "shard_index must be in [0, shard_count)");
  if (options_.device_resident()) {
    split_.images = split_.images.to(options_.device());
    split_.labels = split_.labels.to(options_.device());
  }
}

BatchLoader::~BatchLoader() {
  stop_producer();
}

int64_t shard_length(int64_t size, const LoaderOptions& options) {
  const int64_t count = options.shard_count(), index = options.shard_index();
  if (options.drop_last()) return size / count;
  return size > index ? (size - index + count - 1) / count : 0;
}

int64_t batch_count(int64_t size, const LoaderOptions& options) {
  const int64_t n = shard_length(size, options), b = options.batch_size();
  return options.drop_last() ? n / b : (n + b - 1) / b;
}

namespace {

constexpr int64_t kImageBytes = kChannels * kImageSide * kImageSide;  // uint8, as stored
constexpr auto kIndexBytes = static_cast<int64_t>(sizeof(int64_t));

}  // namespace

std::vector<int64_t> device_resident_tensors(int64_t train_size, int64_t test_size,
                                             int64_t train_shard) {
  return {train_size * kImageBytes, train_size * kIndexBytes, test_size * kImageBytes,
          test_size * kIndexBytes, train_shard * kIndexBytes};
}

int64_t device_resident_bytes(int64_t train_size, int64_t test_size, int64_t train_shard) {
  const auto tensors = device_resident_tensors(train_size, test_size, train_shard);
  return std::accumulate(tensors.begin(), tensors.end(), int64_t{0});
}

torch::Tensor epoch_order(int64_t size, int64_t epoch, const LoaderOptions& options) {
  const auto index_options = torch::TensorOptions(torch::kInt64);
  torch::Tensor order;
  if (options.shuffle()) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(mix_seed(options.seed(), epoch, ~0ULL));
    order = torch::randperm(size, gen, index_options);
  } else {
    order = torch::arange(size, index_options);
  }
  if (options.shard_count() > 1) {
    const int64_t end =
        options.drop_last() ? shard_length(size, options) * options.shard_count() : size;
    order = order.slice(0, options.shard_index(), end, options.shard_count());
  }
  return order;
}

int64_t BatchLoader::shard_size() const {
  return shard_length(split_.size(), options_);
}

Ahead BatchLoader::ahead() const {
  return {options_.prefetch(), options_.prefetch() > 0 ? 1 : 0};
}

int64_t BatchLoader::batches_per_epoch() const {
  return batch_count(split_.size(), options_);
}

void BatchLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  stop_producer();
  epoch_ = epoch;
  next_batch_ = first_batch;
  order_ = epoch_order(split_.size(), epoch, options_).to(split_.images.device());
  ready_.clear();
  error_ = nullptr;
  stopping_ = false;
  produced_all_ = false;
  if (options_.prefetch() > 0)
    producer_ = std::thread([this, first_batch] { produce(first_batch); });
}

Batch BatchLoader::prepare(int64_t batch_index) const {
  if (options_.simulated_delay_ms() > 0) {
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::milli>(options_.simulated_delay_ms()));
  }
  const int64_t start = batch_index * options_.batch_size();
  const int64_t count = std::min(options_.batch_size(), order_.size(0) - start);
  auto indices = order_.narrow(0, start, count);
  auto images = split_.images.index_select(0, indices);
  auto labels = split_.labels.index_select(0, indices);
  const auto device = options_.device();
  if (images.device() != device) {
    // Pinned staging memory lets the copy run asynchronously with the compute stream.
    if (device.is_cuda()) {
      images = images.pin_memory();
      labels = labels.pin_memory();
    }
    images = images.to(device, /*non_blocking=*/true);
    labels = labels.to(device, /*non_blocking=*/true);
  }
  if (options_.augment()) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(
        mix_seed(options_.seed(), epoch_, static_cast<uint64_t>(batch_index)));
    images = crop_and_flip(images, random_augment_params(count, options_.padding(), gen),
                           options_.padding());
  }
  return {resize_images(normalize_(images), options_.image_size(), options_.memory_format()),
          labels, batch_index};
}

namespace {

// Keeps this thread in step with the profiler of the main thread: joined while a profiling
// window is open, so the loader's own ops (gather, copy, augmentation) are traced too.
class ProfilerFollower {
 public:
  void follow() {
    namespace prof = torch::autograd::profiler;
    const bool enabled = prof::isProfilerEnabledInMainThread();
    if (enabled == joined_) return;
    if (!enabled) {
      prof::disableProfilerInChildThread();
      joined_ = false;
      return;
    }
    try {
      prof::enableProfilerInChildThread();
      joined_ = true;
    } catch (const c10::Error&) {
      // The window closed between the two calls: nothing to join.
    }
  }
  ~ProfilerFollower() {
    if (joined_) torch::autograd::profiler::disableProfilerInChildThread();
  }

 private:
  bool joined_ = false;
};

}  // namespace

void BatchLoader::produce(int64_t first_batch) {
  const auto device = options_.device();
  // A new thread starts on device 0; make it work on the training device, on a stream of its own.
  c10::DeviceGuard device_guard(device);
  std::optional<c10::impl::VirtualGuardImpl> accelerator;
  std::optional<c10::StreamGuard> stream_guard;
  if (!device.is_cpu()) {
    accelerator.emplace(device.type());
    stream_guard.emplace(accelerator->getStreamFromGlobalPool(device));
  }
  ProfilerFollower profiler;
  try {
    for (int64_t b = first_batch; b < batches_per_epoch(); ++b) {
      profiler.follow();
      Prepared prepared{prepare(b), nullptr, b};
      if (accelerator) {
        prepared.ready = std::make_unique<c10::Event>(device.type());
        prepared.ready->record(accelerator->getStream(device));
      }
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] {
        return stopping_ || static_cast<int64_t>(ready_.size()) < options_.prefetch();
      });
      if (stopping_) return;
      ready_.push_back(std::move(prepared));
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  produced_all_ = true;
  changed_.notify_all();
}

std::optional<Batch> BatchLoader::next() {
  if (options_.prefetch() == 0) {
    if (next_batch_ >= batches_per_epoch()) return std::nullopt;
    auto batch = prepare(next_batch_++);
    if (next_batch_ == batches_per_epoch()) release_order();
    return batch;
  }
  Prepared prepared;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !ready_.empty() || produced_all_; });
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(error_);
      return std::nullopt;
    }
    prepared = std::move(ready_.front());
    ready_.pop_front();
    changed_.notify_all();
  }
  if (prepared.ready) {
    // The consumer's stream waits for the producer's work, and the allocator learns that the
    // batch's memory is in use on the consumer's stream too.
    const auto device = options_.device();
    const auto consumer = c10::impl::VirtualGuardImpl(device.type()).getStream(device);
    prepared.ready->block(consumer);
    prepared.batch.images.record_stream(consumer);
    prepared.batch.labels.record_stream(consumer);
  }
  // The last batch: the producer is done with the order, and (above) this stream waits for it.
  if (prepared.index == batches_per_epoch() - 1) release_order();
  return std::move(prepared.batch);
}

void BatchLoader::stop() {
  stop_producer();
  ready_.clear();
  error_ = nullptr;
  produced_all_ = true;
  next_batch_ = batches_per_epoch();
  release_order();
}

void BatchLoader::release_order() {
  // The epoch's order is not kept past its last batch: a loader between epochs (the test loader
  // during training) holds nothing, so a resumed process, whose test loader has not run yet,
  // measures the same training peak as the process that ran the last evaluation.
  order_ = torch::Tensor();
}

void BatchLoader::stop_producer() {
  if (!producer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  producer_.join();
}

std::optional<Batch> next_batch_across_epochs(Loader& loader, int64_t& epoch) {
  auto batch = loader.next();
  if (!batch) {
    loader.start_epoch(++epoch);
    batch = loader.next();
  }
  return batch;
}

}  // namespace data
