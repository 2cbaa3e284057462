#include "training/cards/step_operations.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "training/cards/forward_layers.h"

namespace training {

namespace {

// ATen's multi-tensor kernels (MultiTensorApply.cuh): at most this many tensors and 320 blocks
// of 65,536 elements a launch, for kernels over 1, 2 or 3 lists of tensors.
constexpr int64_t kChunk = 65536, kBlocksPerLaunch = 320;
int64_t multi_tensor_launches(int64_t tensors, int64_t parameters, int lists) {
  const int64_t per_launch = lists == 1 ? 110 : lists == 2 ? 64 : 48;
  const int64_t chunks = parameters / kChunk + tensors;
  return std::max((tensors + per_launch - 1) / per_launch,
                  (chunks + kBlocksPerLaunch - 1) / kBlocksPerLaunch);
}

class StepBuilder {
 public:
  StepBuilder(const StepShape& shape, const ForwardLayers& forward)
      : shape_(shape),
        forward_(forward),
        n_(static_cast<double>(shape.batch)),
        s_(static_cast<double>(activation_bytes(shape.precision))),
        half_(shape.precision != Precision::FP32) {}

  // One micro-batch's operations, each counted accumulate_steps times, then the accumulation of
  // the micro-batches after the first and the update.
  std::vector<StepOperation> build() {
    input();
    for (const Layer& layer : forward_.layers) forward_layer(layer, OpPass::Forward);
    loss();
    recompute();
    for (auto it = forward_.layers.rbegin(); it != forward_.layers.rend(); ++it) backward(*it);
    running_sums();
    for (auto& op : ops_) op.count = shape_.accumulate_steps;
    if (shape_.accumulate_steps > 1) accumulate();
    update();
    if (shape_.weight_average) average();
    return std::move(ops_);
  }

 private:
  void add(OpKind kind, OpPass pass, double flops, double bytes, int64_t kernels) {
    ops_.push_back({kind, pass, flops, bytes, kernels, false, 0, 0, 1});
  }
  void add_matrix(OpKind kind, OpPass pass, double flops, double bytes, int64_t rows,
                  int64_t columns) {
    ops_.push_back({kind, pass, flops, bytes, 1, true, rows, columns, 1});
  }
  double batch_elements(const std::vector<int64_t>& shape) const {
    return n_ * static_cast<double>(elements(shape));
  }

  void input() {
    const double stored = n_ * 3.0 * static_cast<double>(kStoredImageSize * kStoredImageSize);
    const double sized = n_ * 3.0 * static_cast<double>(shape_.image_size * shape_.image_size);
    add(OpKind::Input, OpPass::Forward, 0, stored * (1 + 4), 1);  // uint8 -> float, its layout
    add(OpKind::Input, OpPass::Forward, 2 * stored, 2 * stored * 8, 2);  // normalised in place
    if (shape_.image_size != kStoredImageSize) {
      add(OpKind::Input, OpPass::Forward, 8 * sized, (stored + sized) * 4, 1);  // bilinear
    }
    if (half_) add(OpKind::Cast, OpPass::Forward, 0, sized * (4 + 2), 1);  // autocast's input
  }

  void forward_layer(const Layer& layer, OpPass pass) {
    const double in = batch_elements(layer.input), out = batch_elements(layer.output);
    switch (layer.kind) {
      case LayerKind::Convolution:
        convolution(layer, pass, /*backward=*/false);
        break;
      case LayerKind::BatchNorm:  // statistics, running statistics, normalised
        add(OpKind::BatchNorm, pass, 8 * out, s_ * 3 * out, batch_norm_kernels(layer, true));
        break;
      case LayerKind::BatchNormCounter:
        add(OpKind::BatchNorm, pass, 1, 16, 1);
        break;
      case LayerKind::ReLU:
        add(OpKind::ReLU, pass, out, s_ * 2 * out, 1);
        break;
      case LayerKind::ResidualAdd:
        add(OpKind::ResidualAdd, pass, out, s_ * 3 * out, 1);
        break;
      case LayerKind::MaxPool:
        add(OpKind::Pooling, pass, 9 * out, s_ * in + (s_ + 8) * out, 1);  // with int64 indices
        break;
      case LayerKind::AveragePool:
        add(OpKind::Pooling, pass, in, s_ * (in + out), 1);
        break;
      case LayerKind::Linear:
        linear(layer, pass, /*backward=*/false);
        break;
      case LayerKind::View:
        break;
      case LayerKind::Other:
        add(OpKind::Other, pass, in, s_ * (in + out), 1);
        break;
    }
  }

  void convolution(const Layer& layer, OpPass pass, bool backward) {
    const double in = batch_elements(layer.input), out = batch_elements(layer.output);
    const double weight = static_cast<double>(elements(layer.weight));
    const int64_t out_channels = layer.weight[0];
    const int64_t per_output = elements(layer.weight) / out_channels;  // (C_in / groups) k k
    const double flops = 2 * out * static_cast<double>(per_output);
    const int64_t pixels_out = shape_.batch * layer.output[2] * layer.output[3];
    const int64_t pixels_in = shape_.batch * layer.input[2] * layer.input[3];
    // In half precision and the contiguous layout, each of cuDNN's three calls transposes its
    // two operands to NHWC and its result back (cuDNN's "Tensor Transformations"): three
    // kernels, each reading and writing its tensor.
    const auto transposes = [&](double tensors) {
      if (half_ && !shape_.channels_last) add(OpKind::Layout, pass, 0, 2 * s_ * tensors, 3);
    };
    if (!backward) {
      if (half_) add(OpKind::Cast, pass, 0, weight * (4 + 2), 1);
      transposes(in + weight + out);
      add_matrix(OpKind::Convolution, pass, flops, s_ * (in + out + weight), pixels_out,
                 out_channels);
      return;
    }
    if (!layer.first_matrix) {  // the input's gradient
      transposes(out + weight + in);
      add_matrix(OpKind::Convolution, pass, flops, s_ * (out + weight + in), pixels_in,
                 layer.input[1]);
    }
    // The weight's gradient reduces over the batch's pixels: split over the SMs (split-K), its
    // tiles are no measure of how it fills them.
    transposes(in + out + weight);
    add_matrix(OpKind::Convolution, pass, flops, s_ * (out + in + weight), 0, 0);
    if (half_) add(OpKind::Cast, pass, 0, weight * (2 + 4), 1);
  }

  void linear(const Layer& layer, OpPass pass, bool backward) {
    const double features = static_cast<double>(layer.weight[1]);
    const double classes = static_cast<double>(layer.weight[0]);
    const double weight = features * classes;
    const double flops = 2 * n_ * features * classes;
    const double bytes = s_ * (n_ * features + weight + n_ * classes);
    if (!backward) {
      if (half_) add(OpKind::Cast, pass, 0, (weight + classes) * (4 + 2), 2);
      add_matrix(OpKind::Classifier, pass, flops, bytes, shape_.batch, layer.weight[0]);
      return;
    }
    add_matrix(OpKind::Classifier, pass, flops, bytes, shape_.batch, layer.weight[1]);
    add_matrix(OpKind::Classifier, pass, flops, bytes, 0, 0);           // the weight's, split-K
    add(OpKind::Classifier, pass, n_ * classes, s_ * n_ * classes, 1);  // the bias's gradient
    if (half_) add(OpKind::Cast, pass, 0, (weight + classes) * (2 + 4), 2);
  }

  // Cross-entropy in float32 (autocast's fp32 list): log-softmax and NLL, and their backward.
  void loss() {
    const double logits = n_ * static_cast<double>(shape_.model.num_classes());
    if (half_) add(OpKind::Cast, OpPass::Forward, 0, logits * (2 + 4), 1);
    int64_t scalars = 0;
    if (shape_.accumulate_steps > 1) ++scalars;          // loss / micro-batches
    if (shape_.precision == Precision::FP16) ++scalars;  // loss x the scale
    add(OpKind::Loss, OpPass::Forward, 5 * logits, 4 * 3 * logits, 2 + scalars);
    // The gradient's seed, NLL's backward (zeroed, scattered), log-softmax's backward.
    add(OpKind::Loss, OpPass::Backward, 3 * logits, 4 * 4 * logits, 4 + scalars);
    if (shape_.label_smoothing) {  // ATen's cross_entropy: the smoothed term beside NLL's
      add(OpKind::Loss, OpPass::Forward, 2 * logits, 4 * 2 * logits, 10);
      add(OpKind::Loss, OpPass::Backward, 2 * logits, 4 * 3 * logits, 6);
    }
    if (half_) add(OpKind::Cast, OpPass::Backward, 0, logits * (4 + 2), 1);
  }

  // The checkpointed blocks' forward once more in backward, their BatchNorm buffers (running
  // mean, variance, counter) copied before and restored after.
  void recompute() {
    if (shape_.recomputed.empty()) return;
    for (const Layer& layer : forward_.layers) {
      if (layer.block < 0 || !shape_.recomputed.at(static_cast<size_t>(layer.block))) continue;
      forward_layer(layer, OpPass::Recompute);
      if (layer.kind == LayerKind::BatchNorm) {
        // running mean and variance cloned (read, written) and copied back, the counter too
        add(OpKind::BatchNorm, OpPass::Recompute, 0, 2 * 4 * 4 * layer.output[1] + 2 * 16, 6);
      }
    }
  }

  void backward(const Layer& layer) {
    const double in = batch_elements(layer.input), out = batch_elements(layer.output);
    const OpPass pass = OpPass::Backward;
    switch (layer.kind) {
      case LayerKind::Convolution:
        convolution(layer, pass, /*backward=*/true);
        break;
      case LayerKind::BatchNorm:  // reduced, then elementwise
        add(OpKind::BatchNorm, pass, 12 * out, s_ * 5 * out, batch_norm_kernels(layer, false));
        break;
      case LayerKind::ReLU:
        add(OpKind::ReLU, pass, out, s_ * 3 * out, 1);
        break;
      case LayerKind::ResidualAdd: {
        // The block's input is read by both paths: autograd sums its two gradients.
        const double block_in =
            n_ * static_cast<double>(forward_.block_inputs.at(static_cast<size_t>(layer.block)));
        add(OpKind::Gradients, pass, block_in, s_ * 3 * block_in, 1);
        break;
      }
      case LayerKind::MaxPool:
        // The input's gradient zeroed, then every element of it written from the output's
        // gradient and the indices.
        add(OpKind::Pooling, pass, out, 2 * s_ * in + (s_ + 8) * out, 2);
        break;
      case LayerKind::AveragePool:
        add(OpKind::Pooling, pass, in, s_ * (in + out), 1);
        break;
      case LayerKind::Linear:
        linear(layer, pass, /*backward=*/true);
        break;
      case LayerKind::Other:
        add(OpKind::Other, pass, in, s_ * (in + out), 1);
        break;
      case LayerKind::BatchNormCounter:
      case LayerKind::View:
        break;
    }
  }

  // Each micro-batch after the first adds its gradients to those held (fp32), one kernel each;
  // before the first, BatchNorm's buffers are copied (the trainer's copy_buffers: each clone
  // reads and writes it).
  void accumulate() {
    const double p = static_cast<double>(forward_.parameters);
    add(OpKind::Gradients, OpPass::Backward, p, 4 * 3 * p, forward_.parameter_tensors);
    ops_.back().count = shape_.accumulate_steps - 1;
    const auto [layers, channels] = batch_norms();
    add(OpKind::BatchNorm, OpPass::Forward, 0, 2 * (8 * channels + 8 * layers), 3 * layers);
  }

  // The trainer's running sums a micro-batch (StepSums::add): the loss in fp64 times the
  // images, argmax, eq and sum of the correct ones, two adds to the sums (the first micro-batch's
  // two are the epoch's instead).
  void running_sums() {
    const double logits = n_ * static_cast<double>(shape_.model.num_classes());
    add(OpKind::Loss, OpPass::Forward, logits, s_ * logits + 8 * n_, 7);
  }

  // The weight average after each step (WeightAverage::update): one multi-tensor lerp over the
  // float parameters and buffers (reads both, writes the average), each integer buffer copied.
  void average() {
    const auto [layers, channels] = batch_norms();
    const double elements = static_cast<double>(forward_.parameters + 2 * channels);
    const int64_t tensors = forward_.parameter_tensors + 2 * layers;
    add(OpKind::Optimizer, OpPass::Update, 3 * elements, 4 * 3 * elements,
        multi_tensor_launches(tensors, static_cast<int64_t>(elements), 2) + layers);
  }

  // BatchNorm's layers and their channels in all.
  std::pair<int64_t, int64_t> batch_norms() const {
    int64_t layers = 0, channels = 0;
    for (const Layer& layer : forward_.layers) {
      if (layer.kind != LayerKind::BatchNorm) continue;
      ++layers;
      channels += layer.output[1];
    }
    return {layers, channels};
  }

  // cuDNN's one kernel each way in fp32 and fp16 (ATen's _select_batch_norm_backend takes it but
  // for bf16); ATen's own in bf16: channels_last runs the statistics, the running statistics and
  // the normalisation forward, the reduction and the elementwise pass backward, each reduction
  // after zeroing its semaphores where it spans more than one block row (grid.y > 1:
  // flexible_launch_configs gives 8 rows or more above 1,792 values a channel, one below);
  // contiguous has three kernels forward, one backward.
  int64_t batch_norm_kernels(const Layer& layer, bool forward) const {
    if (shape_.precision != Precision::BF16) return 1;
    if (!shape_.channels_last) return forward ? 3 : 1;
    const int64_t reduced = shape_.batch * layer.output[2] * layer.output[3];
    return (forward ? 3 : 2) + (reduced > 1792 ? 1 : 0);
  }

  void update() {
    const double p = static_cast<double>(forward_.parameters);
    const int64_t tensors = forward_.parameter_tensors;
    if (shape_.precision == Precision::FP16) {
      // Unscale and check (multi-tensor), the inverse scale (3 kernels), the scale's update, the
      // flag zeroed; the flag's read-back is a synchronisation this model does not count.
      add(OpKind::Scaler, OpPass::Update, p, 4 * 2 * p,
          multi_tensor_launches(tensors, forward_.parameters, 1) + 5);
    }
    if (shape_.fused_optimizer) {  // two parameter groups (decayed or not), one call each
      const int lists = shape_.momentum ? 3 : 2;
      const int64_t launches = multi_tensor_launches(tensors, forward_.parameters, lists) + 1;
      add(OpKind::Optimizer, OpPass::Update, 6 * p, 4 * p * (2 * lists - 1), launches);
      return;
    }
    // torch::optim::SGD, per parameter: weight decay (not on the 1-d group unless
    // decay_norm_and_bias), momentum (mul, add), Nesterov's add, the update; 12 bytes a kernel
    // but the momentum's in-place scaling.
    const int64_t common = 1 + (shape_.momentum ? 2 + (shape_.nesterov ? 1 : 0) : 0);
    const int64_t vectors = forward_.vector_parameter_tensors;
    const int64_t decayed =
        shape_.weight_decay ? tensors - (shape_.decay_norm_and_bias ? 0 : vectors) : 0;
    const double decayed_elements =
        shape_.weight_decay
            ? p - (shape_.decay_norm_and_bias ? 0 : static_cast<double>(forward_.vector_parameters))
            : 0;
    const double kernel_elements = p * static_cast<double>(common) + decayed_elements;
    const double scaled_in_place = shape_.momentum ? p : 0;  // buf.mul_: read, written, 8 bytes
    add(OpKind::Optimizer, OpPass::Update, 2 * kernel_elements,
        4 * 3 * kernel_elements - 4 * scaled_in_place, common * tensors + decayed);
  }

  const StepShape& shape_;
  const ForwardLayers& forward_;
  const double n_, s_;
  const bool half_;
  std::vector<StepOperation> ops_;
};

}  // namespace

const char* op_kind_name(OpKind kind) {
  static const char* const names[kOpKinds] = {
      "input",     "convolution", "BatchNorm",  "ReLU",  "residual add",
      "pooling",   "classifier",  "loss",       "casts", "layout transposes",
      "gradients", "optimizer",   "GradScaler", "other"};
  return names[static_cast<int>(kind)];
}

int64_t activation_bytes(Precision precision) {
  return precision == Precision::FP32 ? 4 : 2;
}

StepShape StepShape::of(const Config& config, int64_t batch) {
  StepShape shape;
  shape.model = config.model;
  shape.image_size = config.data.image_size;
  shape.batch = batch;
  shape.accumulate_steps = config.training.accumulate_steps;
  shape.precision = config.training.precision;
  shape.channels_last = config.training.memory_format.value_or(c10::MemoryFormat::ChannelsLast) ==
                        c10::MemoryFormat::ChannelsLast;
  const auto names = models::block_names(config.model.depth());
  const auto& ck = config.checkpointing;
  if (ck.mode() == CheckpointMode::On) shape.recomputed.assign(names.size(), true);
  if (ck.mode() == CheckpointMode::Auto) {
    if (!ck.blocks()) {
      throw std::invalid_argument(
          "checkpointing auto: the blocks it recomputes are chosen when it runs");
    }
    shape.recomputed.assign(names.size(), false);
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& chosen = *ck.blocks();
      shape.recomputed[i] = std::find(chosen.begin(), chosen.end(), names[i]) != chosen.end();
    }
  }
  shape.fused_optimizer = config.optimizer.fused();
  shape.momentum = config.optimizer.momentum() > 0;
  shape.nesterov = config.optimizer.nesterov();
  shape.weight_decay = config.optimizer.weight_decay() > 0;
  shape.decay_norm_and_bias = config.optimizer.decay_norm_and_bias();
  shape.weight_average = config.training.ema_decay > 0;
  shape.label_smoothing = config.training.label_smoothing > 0;
  return shape;
}

std::vector<StepOperation> step_operations(const StepShape& shape) {
  return StepBuilder(shape, forward_layers(shape.model, shape.image_size)).build();
}

}  // namespace training
