// An exponential moving average of the weights (training.ema_decay): after every optimizer step
// each floating-point parameter and buffer of the average moves toward the model's,
//   average = decay * average + (1 - decay) * model,
// and integer buffers (BatchNorm's step count) are copied. Evaluation then runs the average, which
// on short, large-batch schedules is usually the better model. The update is a few foreach
// kernels with no host synchronisation, so a graph-captured step captures it too.
#pragma once

#include <torch/torch.h>

#include "models/resnet.h"

namespace training {

class WeightAverage {
 public:
  // `average`: a model of `model`'s architecture on its device; it starts as a copy of its weights.
  WeightAverage(models::ResNet model, models::ResNet average, double decay);

  void update();
  // Starts the average again from the model's current weights.
  void reset();

  models::ResNet& average() { return average_; }
  double decay() const { return decay_; }

 private:
  models::ResNet model_, average_;
  double decay_;
  std::vector<torch::Tensor> model_floats_, average_floats_;  // parameters and float buffers
  std::vector<torch::Tensor> model_ints_, average_ints_;      // integer buffers
};

}  // namespace training
