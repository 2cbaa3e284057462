#include "training/cards/forward_layers.h"

#include <ATen/Context.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#include "training/platform/memory.h"

namespace training {

namespace {

struct Recording {
  ForwardLayers result;
  int depth = 0;  // of the operation now running: only depth 0 is a layer
  int block = -1;
  bool convolution_seen = false;
};

thread_local Recording* recording = nullptr;

// Recorded at two images (BatchNorm refuses one value per channel in training, as after a
// ResNet's last stage at 32x32 with the ImageNet stem), kept per image.
constexpr int64_t kImages = 2;

std::vector<int64_t> shape_of(const c10::IValue& value) {
  return value.isTensor() ? value.toTensor().sizes().vec() : std::vector<int64_t>{};
}

std::vector<int64_t> per_image(std::vector<int64_t> shape) {
  if (!shape.empty() && shape[0] == kImages) shape[0] = 1;
  return shape;
}

LayerKind kind_of(const char* name, const std::vector<int64_t>& input) {
  static const std::map<std::string, LayerKind> kinds = {
      {"aten::conv2d", LayerKind::Convolution},
      {"aten::convolution", LayerKind::Convolution},
      {"aten::batch_norm", LayerKind::BatchNorm},
      {"aten::relu_", LayerKind::ReLU},
      {"aten::relu", LayerKind::ReLU},
      {"aten::max_pool2d", LayerKind::MaxPool},
      {"aten::adaptive_avg_pool2d", LayerKind::AveragePool},
      {"aten::linear", LayerKind::Linear},
      {"aten::addmm", LayerKind::Linear},  // the C++ Linear's bias + input x weight^T
      {"aten::t", LayerKind::View},
      {"aten::flatten", LayerKind::View},
      {"aten::view", LayerKind::View},
      {"aten::reshape", LayerKind::View},
  };
  const std::string op = name;
  if (op == "aten::add_" || op == "aten::add") {
    return input.empty() ? LayerKind::BatchNormCounter : LayerKind::ResidualAdd;
  }
  const auto found = kinds.find(op);
  return found == kinds.end() ? LayerKind::Other : found->second;
}

// A layer begun: its inputs are read now (they are not kept for the end).
struct LayerBegun : at::ObserverContext {
  Layer layer;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (!recording || recording->depth++ != 0) return nullptr;  // inside another operation
  const auto inputs = fn.inputs();
  auto begun = std::make_unique<LayerBegun>();
  Layer& layer = begun->layer;
  layer.input = inputs.empty() ? std::vector<int64_t>{} : per_image(shape_of(inputs[0]));
  layer.kind = kind_of(fn.name(), layer.input);
  if (std::strcmp(fn.name(), "aten::addmm") == 0) {  // (bias, input, weight^T)
    layer.input = per_image(shape_of(inputs[1]));
    const auto transposed = shape_of(inputs[2]);
    layer.weight = {transposed.at(1), transposed.at(0)};
  } else if (layer.kind == LayerKind::Convolution || layer.kind == LayerKind::Linear) {
    layer.weight = shape_of(inputs[1]);
    if (layer.kind == LayerKind::Convolution && inputs.size() > 6 && inputs[6].isInt()) {
      layer.groups = inputs[6].toInt();
    }
    if (layer.kind == LayerKind::Convolution && !recording->convolution_seen) {
      layer.first_matrix = true;
      recording->convolution_seen = true;
    }
  }
  layer.block = recording->block;
  return begun;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (!recording) return;
  --recording->depth;
  if (!context) return;
  Layer layer = std::move(static_cast<LayerBegun*>(context)->layer);
  if (!fn.outputs().empty()) layer.output = per_image(shape_of(fn.outputs()[0]));
  if (layer.output.empty()) layer.output = layer.input;  // in place
  recording->result.layers.push_back(std::move(layer));
}

// The CPU's memory.limit, lifted while the layers are recorded (they describe the model, not a
// step this CPU must fit), restored however the recording ends.
class LimitLifted {
 public:
  LimitLifted() { TrackingCpuAllocator::instance().set_limit(0); }
  ~LimitLifted() { TrackingCpuAllocator::instance().set_limit(limit_); }
  LimitLifted(const LimitLifted&) = delete;
  LimitLifted& operator=(const LimitLifted&) = delete;

 private:
  int64_t limit_ = TrackingCpuAllocator::instance().limit();
};

ForwardLayers record(const models::ResNetOptions& options, int64_t image_size) {
  const LimitLifted lifted;
  torch::NoGradGuard no_grad;
  models::ResNet model(options);
  model->train();
  Recording state;
  for (const auto& p : model->parameters()) {
    if (!p.requires_grad()) continue;
    state.result.parameters += p.numel();
    ++state.result.parameter_tensors;
    if (p.dim() == 1) {
      state.result.vector_parameters += p.numel();
      ++state.result.vector_parameter_tensors;
    }
  }
  model->set_segments(std::vector<int64_t>(model->blocks().size(), 1),
                      [&state](const models::Segment& segment, const torch::Tensor& x) {
                        state.block = static_cast<int>(segment.first_block);
                        state.result.block_inputs.push_back(x.numel() / kImages);
                        torch::Tensor y = segment.forward(x);
                        state.block = -1;
                        return y;
                      });
  const auto input = torch::zeros({kImages, 3, image_size, image_size});
  recording = &state;
  const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                                     .needsInputs(true)
                                                     .needsOutputs(true)
                                                     .scopes({at::RecordScope::FUNCTION}));
  // oneDNN would first compile a kernel for each convolution's shape (seconds in all); ATen's own
  // convolution runs this one image at once. Restored after.
  const bool onednn = at::globalContext().userEnabledMkldnn();
  at::globalContext().setUserEnabledMkldnn(false);
  auto restore = [&] {
    at::removeCallback(handle);
    recording = nullptr;
    at::globalContext().setUserEnabledMkldnn(onednn);
  };
  try {
    model->forward(input);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  if (state.result.layers.empty()) {
    throw std::runtime_error("the model's forward dispatched no operation to record");
  }
  return state.result;
}

}  // namespace

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const ForwardLayers& forward_layers(const models::ResNetOptions& model, int64_t image_size) {
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int, int64_t, int64_t>, ForwardLayers> recorded;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(model.depth(), static_cast<int>(model.stem()),
                                   model.num_classes(), image_size);
  auto found = recorded.find(key);
  if (found == recorded.end()) found = recorded.emplace(key, record(model, image_size)).first;
  return found->second;
}

}  // namespace training
