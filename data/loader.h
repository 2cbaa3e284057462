// Shuffled, augmented batches from a decoded Split, prepared ahead by a background thread.
// Every random choice (the epoch's order, each batch's crops and flips) is drawn from a
// generator seeded by (seed, epoch, batch), so an epoch can be restarted at any batch and yields
// exactly the same batches: that is what makes mid-epoch resume exact.
//
// On CUDA the background thread works on a stream of its own, so the copy to the device and the
// augmentation overlap the training step running on the consumer's stream; each batch carries an
// event that the consumer's stream waits on before using it, and its memory is recorded as used
// by the consumer's stream (record_stream), so the caching allocator never hands it out while
// that stream may still read it. The thread also joins a running profiler, so its work appears in
// the trace and the operator table. Device-generic c10 streams and events are used: no CUDA
// header is needed here.
#pragma once

#include <c10/core/Event.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/augment.h"
#include "data/split.h"

namespace data {

struct LoaderOptions {
  TORCH_ARG(int64_t, batch_size) = 128;
  TORCH_ARG(bool, shuffle) = true;
  // Drop the last incomplete batch (training: every step has the same shape).
  TORCH_ARG(bool, drop_last) = true;
  TORCH_ARG(bool, augment) = true;
  TORCH_ARG(int64_t, padding) = 4;
  TORCH_ARG(torch::Device, device) = torch::kCPU;
  // Keep the whole uint8 split on `device` and gather batches there (no per-batch host copy).
  TORCH_ARG(bool, device_resident) = false;
  // Batches prepared ahead by a background thread; 0 prepares each batch when asked.
  TORCH_ARG(int64_t, prefetch) = 2;
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(c10::MemoryFormat, memory_format) = c10::MemoryFormat::Contiguous;
  // Side of the square the images are resized to (bilinear, after augmentation, on `device`);
  // 0: as stored (CIFAR-10's 32).
  TORCH_ARG(int64_t, image_size) = 0;
  // Extra time spent preparing each batch: simulates a slow input pipeline for studies of
  // prefetching and of the data-wait diagnosis.
  TORCH_ARG(double, simulated_delay_ms) = 0.0;
  // Data-parallel sharding: every rank draws the same epoch order (same seed) and takes every
  // shard_count-th sample from shard_index on, so shards are disjoint and change every epoch.
  // With drop_last each shard gets the same length (the remainder of the order is dropped).
  TORCH_ARG(int64_t, shard_index) = 0;
  TORCH_ARG(int64_t, shard_count) = 1;
};

struct Batch {
  torch::Tensor images;  // float32 [B,3,32,32], normalised, on the device
  torch::Tensor labels;  // int64 [B], on the device
  int64_t index = 0;     // position of the batch in its epoch
};

// A seed for (seed, epoch, batch) that differs for every triple (splitmix64 mixing).
uint64_t mix_seed(uint64_t seed, uint64_t epoch, uint64_t batch);

// What a loader holds beside the batch its consumer trains on, at most, while the consumer trains:
// batches ready, and batches in preparation (each up to one preparation's peak, its temporaries
// with it). A loader that prepares each batch when asked holds none.
struct Ahead {
  int64_t ready = 0;
  int64_t preparing = 0;
};

// What the trainer asks of a loader: epochs of batches. BatchLoader (below) is the project's
// own; TorchDataLoader (torch_data.h) runs LibTorch's torch::data loader over the same split.
class Loader {
 public:
  virtual ~Loader() = default;
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t dataset_size() const = 0;
  // Samples this loader (this shard) visits per epoch.
  virtual int64_t shard_size() const = 0;
  // Starts epoch `epoch` at batch `first_batch`.
  virtual void start_epoch(int64_t epoch, int64_t first_batch = 0) = 0;
  // The next batch of the current epoch, or nullopt at its end.
  virtual std::optional<Batch> next() = 0;
  // Ends the current epoch where it is: nothing is prepared any more and nothing held (the batches
  // ready, the epoch's order), as between epochs; next() gives nullopt until start_epoch.
  virtual void stop() = 0;
  virtual Ahead ahead() const = 0;
  // Images per batch; set_batch_size stops the epoch under way and takes effect from the next
  // start_epoch (an evaluation that runs out of memory making a batch goes on in smaller ones).
  virtual int64_t batch_size() const = 0;
  virtual void set_batch_size(int64_t images) = 0;
};

// The next batch, starting `loader`'s next epoch (++epoch) when the current one is over: batches
// without end, for measurements that count steps, not epochs. nullopt only for a loader whose
// epochs have no batch.
std::optional<Batch> next_batch_across_epochs(Loader& loader, int64_t& epoch);

// The epoch's order of `size` samples for this shard (options' shard_index of shard_count: every
// rank draws the same permutation from (seed, epoch) and takes every shard_count-th sample),
// truncated to equal shards when drop_last; int64, on the CPU.
torch::Tensor epoch_order(int64_t size, int64_t epoch, const LoaderOptions& options);
// The samples one shard visits per epoch, and its batches.
int64_t shard_length(int64_t size, const LoaderOptions& options);
int64_t batch_count(int64_t size, const LoaderOptions& options);

// What device_resident keeps on the training device through training, a tensor's bytes each: the
// training and the test split (images, labels), each loader's own, and the training epoch's order
// (int64, `train_shard` samples; the test loader's order goes with its last batch).
std::vector<int64_t> device_resident_tensors(int64_t train_size, int64_t test_size,
                                             int64_t train_shard);
// Their sum.
int64_t device_resident_bytes(int64_t train_size, int64_t test_size, int64_t train_shard);

class BatchLoader : public Loader {
 public:
  BatchLoader(Split split, LoaderOptions options);
  ~BatchLoader() override;
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  int64_t batches_per_epoch() const override;
  int64_t dataset_size() const override { return split_.size(); }
  int64_t shard_size() const override;
  const LoaderOptions& options() const { return options_; }
  // prefetch batches queued and, while the queue has room, the next in preparation.
  Ahead ahead() const override;

  // Earlier batches of the epoch are skipped, not drawn.
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  // Rethrows a producer's error.
  std::optional<Batch> next() override;
  void stop() override;
  int64_t batch_size() const override { return options_.batch_size(); }
  void set_batch_size(int64_t images) override {
    stop();
    options_.batch_size(images);
  }

 private:
  // A batch from the background thread and, on CUDA, the event its stream recorded after it.
  struct Prepared {
    Batch batch;
    std::unique_ptr<c10::Event> ready;
    int64_t index = 0;  // the batch's place in the epoch
  };

  Batch prepare(int64_t batch_index) const;
  void produce(int64_t first_batch);
  void stop_producer();
  void release_order();

  Split split_;  // on the CPU, or on the device when device_resident
  LoaderOptions options_;
  Normalizer normalize_;
  torch::Tensor order_;  // this epoch's samples for this shard, int64 on the split's device
                         // (released with the epoch's last batch: release_order)
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0;

  std::thread producer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Prepared> ready_;
  std::exception_ptr error_;
  bool stopping_ = false;
  bool produced_all_ = false;
};

}  // namespace data
