// The evaluation of the test split: every batch through the model in eval mode, the loss and
// top-1 accuracy summed over all ranks' shards. A forward pass that runs out of memory is redone
// in halves, a batch that runs out of memory being made starts the split again in batches of half
// as many images (each said once per halving; the results do not depend on it), and a first batch
// is tried before the first training step where memory is bounded (check_fits). An evaluation
// longer than 10 s says where it is (platform/heartbeat.h: batches done, images/s, time left).
#pragma once

#include <torch/torch.h>

#include "data/loader.h"
#include "models/resnet.h"
#include "training/config/config.h"
#include "training/platform/distributed.h"
#include "training/platform/memory.h"

namespace training {

struct Evaluation {
  double loss = 0;      // mean cross-entropy (no label smoothing)
  double accuracy = 0;  // top-1, in [0,1]
  double seconds = 0;
  MemoryStats memory;  // the device's peaks during the evaluation (reset at its start)
};

class Evaluator {
 public:
  Evaluator(const Config& config, torch::Device device, ProcessGroup* group);

  // The whole split of `loader` through `model` (in eval mode, rank 0's buffers on every rank).
  Evaluation run(models::ResNet& model, data::Loader& loader);
  // One batch (the split's first) through `model`, before the first step: what does not fit is
  // split now, not after an epoch of training. Where memory is bounded only (CUDA, memory.limit).
  void check_fits(models::ResNet& model, data::Loader& loader);
  // True while run() or check_fits() runs (an out-of-memory error there needs other remedies).
  bool evaluating() const { return evaluating_; }
  // Where memory is bounded (CUDA, or memory.limit on the CPU): check_fits probes only there.
  bool memory_bounded() const { return device_.is_cuda() || config_.memory.limit > 0; }
  // The last out-of-memory error was a forward pass of one image (halved down to it, a batch of
  // one, or the one image a batch's last chunk held): a smaller eval batch cannot help.
  bool at_one_image() const { return failed_at_one_image_; }

 private:
  // The loader's next batch; where making it runs out of memory, the split starts again in
  // batches of half as many images (the loader's batch size says so), down to one image.
  std::optional<data::Batch> next_batch(data::Loader& loader);
  // One batch into the sums, in chunks of chunk_ images.
  void add_batch(models::ResNet& model, const torch::Tensor& images, const torch::Tensor& labels,
                 torch::Tensor& loss_sum, torch::Tensor& correct);

  const Config& config_;
  torch::Device device_;
  ProcessGroup* group_;
  int64_t chunk_ = 0;  // images per forward pass; 0: the whole batch
  bool evaluating_ = false;
  bool failed_at_one_image_ = false;
};

}  // namespace training
