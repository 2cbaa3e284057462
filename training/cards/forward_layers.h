// The layers of a model's forward pass as the model itself runs them: its forward is run once on
// the CPU for two images of the given size (LibTorch's modules cannot move to the meta device),
// and every top-level ATen operation it dispatches is recorded with its shapes (ATen's
// RecordFunction callbacks, what the profiler reads). Nothing here reads a module's name: a
// layer's kind comes from the operation, its residual block from the model's own segments.
// step_operations.h turns these into a training step's operations for a setting.
#pragma once

#include <cstdint>
#include <vector>

#include "models/resnet.h"

namespace training {

enum class LayerKind {
  Convolution,
  BatchNorm,
  BatchNormCounter,  // num_batches_tracked += 1
  ReLU,
  ResidualAdd,
  MaxPool,
  AveragePool,
  Linear,
  View,   // flatten, view: no kernel
  Other,  // anything else, counted as one elementwise kernel over its tensors
};

struct Layer {
  LayerKind kind = LayerKind::Other;
  std::vector<int64_t> input, output;  // shapes for one image (dimension 0 is 1)
  std::vector<int64_t> weight;         // convolution / linear weight; empty otherwise
  int64_t groups = 1;
  int block = -1;             // the residual block it belongs to in forward order, -1 outside
  bool first_matrix = false;  // the first convolution: its input (the image) needs no gradient
};

struct ForwardLayers {
  std::vector<Layer> layers;
  std::vector<int64_t> block_inputs;  // elements of each residual block's input, one image
  int64_t parameters = 0;             // elements of all trainable parameters
  int64_t parameter_tensors = 0;
  // Of them, the 1-d ones (BatchNorm's weights and biases, the classifier's bias): the SGD's
  // group without weight decay unless optimizer.decay_norm_and_bias.
  int64_t vector_parameters = 0, vector_parameter_tensors = 0;
};

// Recorded once per (model, image_size) and kept (thread-safe). Throws std::runtime_error when
// the forward dispatches nothing (a build without RecordFunction).
const ForwardLayers& forward_layers(const models::ResNetOptions& model, int64_t image_size);

int64_t elements(const std::vector<int64_t>& shape);

}  // namespace training
