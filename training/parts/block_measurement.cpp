// The measurements behind checkpointing.enabled: auto (checkpoint_choice.h): one step with every
// block recomputed alone, watched by a probe (measure_blocks), and what the run's loader holds
// beside the step (held_beside_step).
#include <chrono>

#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/parts/setup.h"
#include "training/platform/device.h"
#include "training/platform/duration.h"
#include "training/platform/heartbeat.h"
#include "training/platform/memory.h"
#include "training/platform/statistics.h"
#include "training/platform/stop_signal.h"
#include "training/step/recompute.h"
#include "training/step/step.h"

namespace training {
namespace {

// Watches a step whose every block is recomputed alone: the windows' peaks, each block's bytes
// (held when recomputed, and when its recomputation runs with autograd recording) and the time
// of its recomputation. Passive (a plain checkpointed runner) until start().
class BlockProbe final : public StepObserver {
 public:
  BlockProbe(torch::Device device, std::vector<std::string> names)
      : device_(device),
        names_(std::move(names)),
        wrapped_(names_.size()),
        held_(names_.size()),
        recorded_(names_.size()),
        seconds_(names_.size()) {}

  void start() { active_ = true; }

  torch::Tensor run(const models::Segment& segment, const torch::Tensor& x) {
    const auto k = static_cast<size_t>(segment.first_block);
    if (!wrapped_[k].forward) wrap(segment);
    if (!active_) return checkpoint(wrapped_[k], x);
    if (k == 0) {
      close("forward stem", 0);
      hook(x, "backward " + names_[0], 0);  // fires once block 0's backward is done
    }
    torch::Tensor y = checkpoint(wrapped_[k], x);
    // What a recomputed block holds: its output (autocast's weight copies, which its forward
    // also made, are held from forward to backward only by the blocks that are not recomputed).
    held_[k] = static_cast<int64_t>(y.nbytes());
    close("forward " + names_[k], static_cast<int64_t>(k) + 1);
    // Fires before block k's backward: closes the window of what ran since (block k+1's
    // backward, or the loss and the head's).
    const bool last = k + 1 == names_.size();
    hook(y, last ? "loss, head and their backward" : "backward " + names_[k + 1],
         static_cast<int64_t>(k) + 1);
    return y;
  }

  void forward_begins() override { reset(); }
  void forward_ends() override {
    if (active_) close("forward head and loss", static_cast<int64_t>(names_.size()));
  }
  void optimizer_begins() override {
    if (active_) close("backward stem", 0);
  }
  void step_ends() override {
    if (!active_) return;
    close("optimizer step", 0);
    active_ = false;
  }

  BlockMeasurement result() const {
    BlockMeasurement m;
    for (size_t k = 0; k < names_.size(); ++k) {
      m.blocks.push_back(
          {names_[k], std::max<int64_t>(0, recorded_[k] - held_[k]), median(seconds_[k])});
    }
    m.windows = windows_;
    return m;
  }

 private:
  // The block's runner, recording its recomputation (the call with autograd on).
  void wrap(const models::Segment& segment) {
    const auto k = static_cast<size_t>(segment.first_block);
    wrapped_[k] = segment;
    wrapped_[k].forward = [this, k, inner = segment.forward](const torch::Tensor& x) {
      if (!active_ || !torch::GradMode::is_enabled()) return inner(x);
      synchronize(device_);
      const auto start = std::chrono::steady_clock::now();
      const int64_t before = allocated();
      torch::Tensor y = inner(x);
      synchronize(device_);
      seconds_[k].push_back(seconds_since(start));
      recorded_[k] = allocated() - before;
      return y;
    };
  }

  void hook(const torch::Tensor& tensor, std::string name, int64_t blocks_before) {
    if (!tensor.requires_grad()) return;
    tensor.register_hook([this, name = std::move(name), blocks_before](const torch::Tensor&) {
      if (active_) close(name, blocks_before);
    });
  }

  // Ends a window at its peak so far (the largest over the measured steps) and starts the next.
  void close(const std::string& name, int64_t blocks_before) {
    synchronize(device_);
    auto found = std::find_if(windows_.begin(), windows_.end(),
                              [&](const PeakWindow& w) { return w.name == name; });
    if (found == windows_.end()) found = windows_.insert(windows_.end(), PeakWindow{name, 0, 0});
    auto& window = *found;
    window.blocks_before = blocks_before;
    window.peak = std::max(window.peak, memory_stats(device_).peak_allocated);
    reset();
  }

  void reset() { reset_peak_memory(device_); }
  int64_t allocated() const { return memory_stats(device_).allocated; }

  torch::Device device_;
  std::vector<std::string> names_;
  std::vector<models::Segment> wrapped_;  // outlive the backward that uses them
  std::vector<int64_t> held_, recorded_;
  std::vector<std::vector<double>> seconds_;
  std::vector<PeakWindow> windows_;  // in the order the step first reached them
  bool active_ = false;
};

}  // namespace

BlockMeasurement measure_blocks(const Config& base, const torch::Device& device) {
  const auto start = std::chrono::steady_clock::now();
  Config config = base;
  config.checkpointing.mode(CheckpointMode::On).granularity(CheckpointGranularity::Block);
  reset_peak_memory(device);  // on the CPU, installs the tracking allocator before the weights
  StepParts parts = build_measured_step_parts(config, device);
  const auto [images, labels] = synthetic_batch(config, device);
  parts.model->train();
  BlockProbe probe(device, models::block_names(config.model.depth()));
  parts.model->set_segments(std::vector<int64_t>(parts.model->blocks().size(), 1),
                            [&probe](const models::Segment& segment, const torch::Tensor& x) {
                              return probe.run(segment, x);
                            });
  // Accumulating (training.accumulate_steps > 1), each step is 2 micro-batches and the second is
  // measured: the first one's gradients are held through it, as in every later micro-batch of
  // training. The budget then applies to the micro-batch with them.
  const int64_t micro_batches = config.training.accumulate_steps > 1 ? 2 : 1;
  const StepOptions options = step_options(config).observer(&probe).accumulate_steps(micro_batches);
  const int64_t measured = 2, batch = config.training.batch_size;
  Heartbeat beat("checkpointing auto: measuring every block recomputed", measured + 1, "steps");
  test_stop_point("block measurement");             // tests: a stop while the blocks are measured
  warm_up(parts, options, images, labels, device);  // the probe records nothing until start()
  beat.advance(1, batch);
  for (int64_t step = 0; step < measured; ++step) {
    std::vector<torch::Tensor> buffers_at_start;  // held through the step, as training does
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      if (micro == 0 && micro_batches > 1) buffers_at_start = copy_buffers(*parts.model);
      if (micro == micro_batches - 1) probe.start();
      train_step(parts, images, labels, options, micro);
    }
    synchronize(device);
    beat.advance(step + 2, (step + 2) * batch);
  }
  BlockMeasurement m = probe.result();
  m.seconds = seconds_since(start);
  return m;
}

int64_t held_beside_step(const Config& config, const torch::Device& device,
                         const data::Split& train, int64_t test_size) {
  int64_t bytes = 0;
  // The loader as configured, over the first batch of `train`: what it holds ahead, and one
  // batch's preparation (its temporaries and the batch it makes) at its peak.
  const int64_t batch = std::min(config.training.batch_size, train.size());
  const auto loader =
      make_loader({train.images.narrow(0, 0, batch), train.labels.narrow(0, 0, batch)}, config,
                  device, /*train=*/true, /*group=*/nullptr);
  const data::Ahead ahead = loader->ahead();
  if (batch > 0 && (ahead.ready > 0 || ahead.preparing > 0)) {
    synchronize(device);
    reset_peak_memory(device);
    const int64_t before = memory_stats(device).allocated;
    loader->start_epoch(0);
    const auto made = loader->next();
    synchronize(device);
    const int64_t preparation = std::max<int64_t>(0, memory_stats(device).peak_allocated - before);
    const int64_t one =
        made ? static_cast<int64_t>(made->images.nbytes() + made->labels.nbytes()) : preparation;
    bytes += ahead.ready * one + ahead.preparing * preparation;
  }
  if (device.is_cuda() && config.data.device_resident) {  // both splits and the epoch's order
    bytes += data::device_resident_bytes(train.size(), test_size, train.size());
  } else if (device.is_cpu()) {  // the epoch's order; the splits are host data
    bytes += train.size() * static_cast<int64_t>(sizeof(int64_t));
  }
  return bytes;
}

}  // namespace training
