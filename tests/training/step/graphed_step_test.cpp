#include "training/step/graphed_step.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "support/step_state.h"
#include "training/config/config.h"
#include "training/parts/components.h"
#include "training/platform/errors.h"
#include "training/step/optim.h"

namespace {

// A graph emulated on the CPU with CUDA graphs' contract: capture records without running,
// replay runs what was recorded. (A real replay runs only the device operations; running the
// whole work again is the stricter test of the data flow: the static inputs must hold the new
// batch, the outputs must be read after the replay.)
class EmulatedGraph : public training::Graph {
 public:
  explicit EmulatedGraph(int* made) { ++*made; }
  void warm_up(const std::function<void()>& work) override { work(); }
  void capture(const std::function<void()>& work) override { work_ = work; }
  void replay() override { work_(); }
  bool captured() const override { return static_cast<bool>(work_); }
  int64_t pool_bytes() const override { return 1; }

 private:
  std::function<void()> work_;
};

// ResNet-18 on the CPU; `training` adds keys to the training section, `extra` other sections.
training::Config cpu_config(const std::string& training = "", const std::string& extra = "") {
  return training::parse_config(
      "model: {arch: resnet18, stem: imagenet}\ntraining: {device: cpu, "
      "batch_size: 8" +
          training + "}\n" + extra,
      "graphed");
}

// The GraphedStep against the eager step from the same weights, both reading the rate from the
// optimizer's tensor: the same losses and weights through warm-up, capture and replays, with a
// rate that changes between replays and a batch size that changes (a second graph), and the
// weight average updated inside the step.
TEST(GraphedStep, TrainsLikeTheEagerStepThroughWarmUpCaptureAndReplays) {
  const auto config = cpu_config(", ema_decay: 0.9");
  training::StepParts eager = training::build_step_parts(config, torch::kCPU);
  training::StepParts graphed_parts = training::build_step_parts(config, torch::kCPU);
  int graphs_made = 0;
  const auto options = training::StepOptions().label_smoothing(0.1);
  training::GraphedStep graphed(graphed_parts, options, torch::kCPU, false,
                                [&] { return std::make_unique<EmulatedGraph>(&graphs_made); });
  dynamic_cast<training::FusedSGD&>(*eager.optimizer).use_device_lr(torch::kCPU);
  eager.model->train();
  graphed_parts.model->train();
  std::vector<torch::Tensor> initial;
  for (const auto& p : eager.model->parameters()) initial.push_back(p.detach().clone());
  torch::manual_seed(3);
  for (int step = 1; step <= 12; ++step) {
    const int64_t batch = step <= 8 ? 8 : 4;
    const auto images = torch::randn({batch, 3, 32, 32});
    const auto labels = torch::randint(0, 10, {batch}, torch::kInt64);
    const double lr = step <= 5 ? 0.1 : step <= 7 ? 0.0 : 0.05;
    training::set_learning_rate(*eager.optimizer, lr);
    training::set_learning_rate(*graphed_parts.optimizer, lr);
    const auto a = training::train_step(eager, images, labels, options);
    const auto b = graphed.run(images, labels);
    EXPECT_TRUE(a.loss.equal(b.loss)) << "step " << step;
    EXPECT_TRUE(a.logits.equal(b.logits)) << "step " << step;
    // Steps 1-3 warm up; 4 is captured and replayed; from 9 the batch is smaller: a new graph
    // warms up for 3 steps (9-11) and is captured at 12.
    const bool captured = step <= 8 ? step > 3 : step > 11;
    EXPECT_EQ(graphed.captured(), captured) << "step " << step;
    EXPECT_EQ(graphed.last_run_replayed(), captured) << "step " << step;
  }
  EXPECT_EQ(graphs_made, 2);
  // Parameters, BatchNorm statistics and step counts, momentum buffers, the weight average.
  test_support::expect_same_step_state(eager, graphed_parts, /*relative=*/0);
  const auto pa = eager.model->parameters();
  const auto ea = eager.ema->average()->parameters();
  for (size_t i = 0; i < ea.size(); ++i) {
    // An average: neither the first weights nor the last.
    EXPECT_FALSE(ea[i].equal(initial[i])) << i;
    EXPECT_FALSE(ea[i].equal(pa[i])) << i;
  }
}

TEST(GraphedStep, NeedsAGraphOnTheCpuAndTheFusedSgd) {
  auto config = cpu_config();
  training::StepParts parts = training::build_step_parts(config, torch::kCPU);
  try {
    training::GraphedStep step(parts, {}, torch::kCPU);
    FAIL() << "a DeviceGraph was made on the CPU";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("training.cuda_graph: CUDA graphs need a CUDA device"),
              std::string::npos)
        << e.what();
  }
  config = cpu_config("", "optimizer: {fused: false}\n");
  training::StepParts plain = training::build_step_parts(config, torch::kCPU);
  int made = 0;
  EXPECT_THROW(training::GraphedStep(plain, {}, torch::kCPU, false,
                                     [&] { return std::make_unique<EmulatedGraph>(&made); }),
               training::UserError);
}

// A graph whose capture fails, as CUDA's does when the work calls something a capture forbids:
// the work is started (recording) and the capture throws.
class FailingGraph : public EmulatedGraph {
 public:
  using EmulatedGraph::EmulatedGraph;
  void capture(const std::function<void()>& /*work*/) override {
    throw std::runtime_error("operation not permitted when stream is capturing");
  }
};

// training.cuda_graph: auto goes on eagerly after a failed capture, training exactly like the
// eager step (the failed capture ran nothing); on stops with the capture's error.
TEST(GraphedStep, AFailedCaptureFallsBackToTheEagerStepUnderAutoOnly) {
  const auto config = cpu_config(", ema_decay: 0.9");
  training::StepParts eager = training::build_step_parts(config, torch::kCPU);
  training::StepParts graphed_parts = training::build_step_parts(config, torch::kCPU);
  int made = 0;
  const auto options = training::StepOptions();
  training::GraphedStep graphed(graphed_parts, options, torch::kCPU,
                                /*eager_if_capture_fails=*/true,
                                [&] { return std::make_unique<FailingGraph>(&made); });
  dynamic_cast<training::FusedSGD&>(*eager.optimizer).use_device_lr(torch::kCPU);
  training::set_learning_rate(*eager.optimizer, 0.1);
  training::set_learning_rate(*graphed_parts.optimizer, 0.1);
  eager.model->train();
  graphed_parts.model->train();
  torch::manual_seed(5);
  for (int step = 1; step <= 7; ++step) {
    const auto images = torch::randn({8, 3, 32, 32});
    const auto labels = torch::randint(0, 10, {8}, torch::kInt64);
    const auto a = training::train_step(eager, images, labels, options);
    const auto b = graphed.run(images, labels);
    EXPECT_TRUE(a.loss.equal(b.loss)) << "step " << step;
    EXPECT_FALSE(graphed.captured()) << "step " << step;
    EXPECT_FALSE(graphed.last_run_replayed()) << "step " << step;
    EXPECT_EQ(graphed.fell_back_to_eager(), step > training::GraphedStep::kWarmupSteps)
        << "step " << step;
  }
  EXPECT_EQ(made, 1);  // no second capture is tried
  test_support::expect_same_step_state(eager, graphed_parts, /*relative=*/0);

  training::StepParts strict_parts = training::build_step_parts(config, torch::kCPU);
  training::GraphedStep strict(strict_parts, options, torch::kCPU,
                               /*eager_if_capture_fails=*/false,
                               [&] { return std::make_unique<FailingGraph>(&made); });
  const auto images = torch::randn({8, 3, 32, 32});
  const auto labels = torch::randint(0, 10, {8}, torch::kInt64);
  for (int64_t step = 1; step <= training::GraphedStep::kWarmupSteps; ++step) {
    strict.run(images, labels);
  }
  EXPECT_THROW(strict.run(images, labels), std::runtime_error);
  EXPECT_FALSE(strict.fell_back_to_eager());
}

TEST(GraphedStep, AutoCapturesOnlyWhereItCan) {
  const torch::Device gpu(torch::kCUDA, 0);
  EXPECT_FALSE(training::use_cuda_graph(cpu_config(), gpu, false));  // off by default
  const auto autos = cpu_config(", cuda_graph: auto");
  EXPECT_TRUE(training::use_cuda_graph(autos, gpu, false));
  EXPECT_FALSE(training::use_cuda_graph(autos, torch::kCPU, false));
  EXPECT_FALSE(training::use_cuda_graph(autos, gpu, /*data_parallel=*/true));
  EXPECT_FALSE(
      training::use_cuda_graph(cpu_config(", cuda_graph: auto, precision: fp16"), gpu, false));
  EXPECT_FALSE(training::use_cuda_graph(
      cpu_config(", cuda_graph: auto", "checkpointing: {enabled: true}\n"), gpu, false));
  EXPECT_FALSE(training::use_cuda_graph(
      cpu_config(", cuda_graph: auto", "optimizer: {fused: false}\n"), gpu, false));
  const auto on = cpu_config(", cuda_graph: on");
  EXPECT_TRUE(training::use_cuda_graph(on, gpu, false));
  EXPECT_THROW(training::use_cuda_graph(on, torch::kCPU, false), training::UserError);
  EXPECT_THROW(training::use_cuda_graph(on, gpu, true), training::UserError);
}

}  // namespace
