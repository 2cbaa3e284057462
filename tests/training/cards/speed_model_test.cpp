// The speed model of a card (training/cards/step_operations.h, speed_model.h,
// speed_calibration.h): operations counted by hand for one block, the fit against its own
// calibration set, a card without a data sheet, and what the ranking must show.
#include <gtest/gtest.h>

#include <cmath>

#include "training/cards/forward_layers.h"
#include "training/cards/speed_calibration.h"
#include "training/cards/step_operations.h"
#include "training/platform/memory.h"

namespace {

using training::Layer;
using training::LayerKind;
using training::OpKind;
using training::OpPass;
using training::Precision;

models::ResNetOptions cifar(int64_t depth) {
  return models::ResNetOptions(depth);
}

TEST(ForwardLayers, RecordsTheModelsOwnLayersWithTheirBlocks) {
  const auto& f = training::forward_layers(cifar(18), 32);
  int convolutions = 0, adds = 0, linear = 0;
  for (const Layer& l : f.layers) {
    convolutions += l.kind == LayerKind::Convolution;
    adds += l.kind == LayerKind::ResidualAdd;
    linear += l.kind == LayerKind::Linear;
  }
  EXPECT_EQ(convolutions, 20);  // the stem, 8 blocks x 2, 3 downsamples
  EXPECT_EQ(adds, 8);
  EXPECT_EQ(linear, 1);
  EXPECT_EQ(f.block_inputs.size(), 8u);
  EXPECT_EQ(f.block_inputs[0], 64 * 32 * 32);
  EXPECT_TRUE(f.layers.front().first_matrix);
  EXPECT_EQ(f.layers.front().block, -1);
  // ResNet-18: 11,173,962 parameters with 10 classes (torchvision's count less the classifier's
  // 1000 outputs), in 62 tensors.
  EXPECT_EQ(f.parameters, 11173962);
  EXPECT_EQ(f.parameter_tensors, 62);
}

// Round 5: `train memory --card H100-SXM --card-only --memory-limit 100MiB` wrote "speed not
// estimated: CPU out of memory ..." with LibTorch's 55-frame trace into the JSON, the table and
// the log. The layers describe the model, not a step this CPU must fit: recorded without the
// CPU's limit, which is restored after.
TEST(ForwardLayers, AreRecordedWithoutTheCpusMemoryLimit) {
  auto& allocator = training::TrackingCpuAllocator::instance();
  const int64_t limit = allocator.stats().allocated + 1024;
  allocator.set_limit(limit);
  int64_t parameters = 0;
  EXPECT_NO_THROW(parameters = training::forward_layers(cifar(34), 40).parameters);
  EXPECT_EQ(allocator.limit(), limit);
  allocator.set_limit(0);
  EXPECT_GT(parameters, 0);
}

// layer1.0 of the CIFAR ResNet-18 at batch 2, fp32: conv 3x3 64->64 at 32x32, BN, ReLU, conv,
// BN, add, ReLU. Counted by hand.
TEST(StepOperations, OneBlockCountedByHand) {
  training::StepShape shape;
  shape.model = cifar(18);
  shape.batch = 2;
  const auto ops = training::step_operations(shape);
  const double act = 2.0 * 64 * 32 * 32, weight = 64.0 * 64 * 9;
  const double conv_flops = 2 * act * 64 * 9;
  // Forward ops of block 0: conv, BatchNorm's counter, BatchNorm (cuDNN's one kernel), ReLU, conv,
  // counter, BatchNorm, add, ReLU. The stem's conv, counter, BatchNorm and ReLU come first.
  std::vector<training::StepOperation> forward;
  for (const auto& op : ops) {
    if (op.pass == OpPass::Forward && op.kind != OpKind::Input) forward.push_back(op);
  }
  const auto& conv = forward[4];
  EXPECT_EQ(conv.kind, OpKind::Convolution);
  EXPECT_TRUE(conv.matrix);
  EXPECT_DOUBLE_EQ(conv.flops, conv_flops);
  EXPECT_DOUBLE_EQ(conv.bytes, 4 * (act + act + weight));
  EXPECT_EQ(conv.gemm_rows, 2 * 32 * 32);
  EXPECT_EQ(conv.gemm_columns, 64);
  EXPECT_EQ(forward[5].kernels, 1);  // num_batches_tracked += 1
  const auto& bn = forward[6];
  EXPECT_EQ(bn.kind, OpKind::BatchNorm);
  EXPECT_DOUBLE_EQ(bn.bytes, 4 * 3 * act);
  EXPECT_EQ(bn.kernels, 1);
  EXPECT_EQ(forward[7].kind, OpKind::ReLU);
  EXPECT_DOUBLE_EQ(forward[7].bytes, 4 * 2 * act);
  EXPECT_EQ(forward[11].kind, OpKind::ResidualAdd);
  EXPECT_DOUBLE_EQ(forward[11].bytes, 4 * 3 * act);
  // Backward: every convolution but the stem's has two GEMMs of the forward's FLOPs; the stem's
  // only its weight gradient.
  double backward_conv = 0, forward_conv = 0;
  for (const auto& op : ops) {
    if (op.kind != OpKind::Convolution) continue;
    (op.pass == OpPass::Backward ? backward_conv : forward_conv) += op.flops;
  }
  const double stem = 2.0 * 2 * 64 * 32 * 32 * 3 * 9;
  EXPECT_NEAR(backward_conv, 2 * forward_conv - stem, 1);
}

TEST(StepOperations, HalfPrecisionHalvesActivationsAndCastsWeights) {
  training::StepShape shape;
  shape.model = cifar(18);
  shape.batch = 4;
  const auto fp32 = training::step_operations(shape);
  shape.precision = Precision::BF16;
  const auto bf16 = training::step_operations(shape);
  shape.channels_last = false;
  const auto contiguous = training::step_operations(shape);
  auto sum = [](const std::vector<training::StepOperation>& ops, OpKind kind) {
    double bytes = 0;
    for (const auto& op : ops) bytes += op.kind == kind ? op.bytes : 0;
    return bytes;
  };
  EXPECT_DOUBLE_EQ(sum(bf16, OpKind::ReLU), sum(fp32, OpKind::ReLU) / 2);
  EXPECT_EQ(sum(fp32, OpKind::Cast), 0);
  EXPECT_GT(sum(bf16, OpKind::Cast), 0);
  EXPECT_EQ(sum(bf16, OpKind::Layout), 0);  // channels_last needs no transposes
  EXPECT_GT(sum(contiguous, OpKind::Layout), 0);
}

// A half-precision convolution in the contiguous layout: each of cuDNN's three calls (forward,
// the input's gradient, the weight's gradient) transposes its own operands to NHWC and its result
// back (cuDNN's "Tensor Transformations"): the forward x, w and y; the input's gradient dy, w and
// dx; the weight's gradient x, dy and dw, each read and written once. The stem has no input
// gradient.
TEST(StepOperations, EachOfCudnnsThreeCallsTransposesItsOwnOperands) {
  training::StepShape shape;
  shape.model = cifar(18);
  shape.batch = 2;
  shape.precision = Precision::BF16;
  shape.channels_last = false;
  double forward = 0, backward = 0;
  int64_t forward_kernels = 0, backward_kernels = 0;
  for (const auto& op : training::step_operations(shape)) {
    if (op.kind != OpKind::Layout) continue;
    (op.pass == OpPass::Forward ? forward : backward) += op.bytes;
    (op.pass == OpPass::Forward ? forward_kernels : backward_kernels) += op.kernels;
  }
  double x_w_y = 0, stem = 0;
  int64_t convolutions = 0;
  for (const Layer& l : training::forward_layers(cifar(18), 32).layers) {
    if (l.kind != LayerKind::Convolution) continue;
    const double operands =
        2.0 * static_cast<double>(training::elements(l.input) + training::elements(l.output)) +
        static_cast<double>(training::elements(l.weight));
    x_w_y += operands;
    if (l.first_matrix) stem = operands;
    ++convolutions;
  }
  EXPECT_EQ(convolutions, 20);
  EXPECT_DOUBLE_EQ(forward, 2 * 2 * x_w_y);  // 2 bytes, read and written
  EXPECT_DOUBLE_EQ(backward, 2 * 2 * (2 * x_w_y - stem));
  EXPECT_EQ(forward_kernels, 3 * convolutions);
  EXPECT_EQ(backward_kernels, 6 * convolutions - 3);
}

TEST(StepOperations, CheckpointingRecomputesTheBlocksForward) {
  training::StepShape shape;
  shape.model = cifar(18);
  const auto plain = training::step_operations(shape);
  shape.recomputed.assign(8, true);
  const auto ck = training::step_operations(shape);
  double recomputed = 0, block_forward = 0;
  for (const auto& op : ck) {
    if (op.pass == OpPass::Recompute && op.kind == OpKind::Convolution) recomputed += op.flops;
  }
  for (const auto& op : plain) {
    if (op.pass == OpPass::Forward && op.kind == OpKind::Convolution) block_forward += op.flops;
  }
  const double stem = 2.0 * 64 * 32 * 32 * 3 * 9;
  EXPECT_NEAR(recomputed, block_forward - stem, 1);
}

TEST(SpeedModel, TheFitReproducesItsCalibrationWithinItsResiduals) {
  const auto& fit = training::fitted_speed();
  const auto& figures = training::calibration_figures();
  ASSERT_EQ(fit.residuals.size(), figures.size());
  for (size_t i = 0; i < figures.size(); ++i) {
    const auto& f = figures[i];
    const auto shape = training::figure_step(f);
    const auto estimate = training::estimate_step(
        training::step_operations(shape), training::find_card(f.card), shape, true, fit.parameters);
    EXPECT_NEAR(estimate.images_per_second() / f.images_per_second - 1, fit.residuals[i], 1e-9)
        << f.card << " " << f.setting();
  }
  const auto& p = fit.parameters;
  for (double e : {p.half_efficiency, p.tf32_efficiency, p.fp32_efficiency, p.memory_efficiency}) {
    EXPECT_GT(e, 0);
    EXPECT_LT(e, 1);
  }
  EXPECT_GT(p.launch_seconds, 0);
  std::cout << training::calibration_report();
}

TEST(SpeedModel, ACardGivenBySizeHasNoSpeed) {
  const auto card = training::find_card("24GiB");
  EXPECT_EQ(training::speed_unknown(card, Precision::BF16, true),
            "no data sheet for '24GiB': speeds not estimated");
  training::Config config;
  EXPECT_THROW(training::predict_step(config, 8, card), std::invalid_argument);
  EXPECT_NE(training::speed_unknown(training::find_card("V100-16GB"), Precision::BF16, true)
                .find("bf16 needs compute capability 8.0"),
            std::string::npos);
}

// The forward's FLOPs from the recorded layers: ResNet-50 with the CIFAR stem is 1.298 GMAC a 32x32
// image (scripts/gpu_check_report.py's figure); with the ImageNet stem at 224 torchvision's
// published 4.09 GMAC (ResNet50_Weights' "GFLOPS").
TEST(StepOperations, ForwardFlopsAreTheModelsPublishedCount) {
  auto forward_flops = [](models::ResNetOptions model, int64_t size) {
    training::StepShape shape;
    shape.model = model;
    shape.image_size = size;
    double flops = 0;
    for (const auto& op : training::step_operations(shape)) {
      if (op.pass == OpPass::Forward && op.matrix) flops += op.flops;
    }
    return flops;
  };
  EXPECT_NEAR(forward_flops(cifar(50), 32) / 2, 1.298e9, 0.005e9);
  const auto imagenet = models::ResNetOptions(50).stem(models::Stem::ImageNet).num_classes(1000);
  EXPECT_NEAR(forward_flops(imagenet, 224) / 2, 4.09e9, 0.03e9);
}

double images_per_second(training::StepShape shape, const char* card) {
  return training::estimate_step(training::step_operations(shape), training::find_card(card), shape,
                                 true, training::fitted_speed().parameters)
      .images_per_second();
}

// Measured on the H200 (docs/gpu.md): ResNet-50 at 32x32 is launch-bound at batch 128, slower per
// image than at 512; the model's ranking follows.
TEST(SpeedModel, ALaunchBoundBatchIsSlowerPerImage) {
  training::StepShape shape;
  shape.model = cifar(50);
  shape.precision = Precision::BF16;
  shape.batch = 128;
  const double small = images_per_second(shape, "H200");
  shape.batch = 512;
  EXPECT_GT(images_per_second(shape, "H200"), 2 * small);
  shape.batch = 128;
  const auto ops = training::step_operations(shape);
  const auto estimate = training::estimate_step(ops, training::find_card("H200"), shape, true,
                                                training::fitted_speed().parameters);
  EXPECT_TRUE(estimate.launch_bound());
  const std::string why = estimate.why();
  EXPECT_EQ(why.rfind("launch-bound: the host's", 0), 0u) << why;
  // It says how much larger a batch costs the host no more time: host / GPU, about.
  const size_t about = why.find("a batch up to about ");
  ASSERT_NE(about, std::string::npos) << why;
  const double larger = std::stod(why.substr(about + 20));
  EXPECT_NEAR(larger, estimate.host_seconds / estimate.gpu_seconds, 0.051) << why;
  EXPECT_GT(larger, 1.0) << why;
}

// A sixth pass: batch 129 was predicted faster than 128 and 127 on a V100 (a row more raised the
// last wave's tile fill, while the FLOPs were counted exact). A larger batch never takes less time.
TEST(SpeedModel, ALargerBatchIsNeverFaster) {
  training::StepShape shape;
  shape.model = models::ResNetOptions(18).stem(models::Stem::ImageNet);
  shape.image_size = 32;
  double last = 0;
  for (int64_t batch = 120; batch <= 136; ++batch) {
    shape.batch = batch;
    const double seconds =
        training::estimate_step(training::step_operations(shape), training::find_card("V100-16GB"),
                                shape, true, training::fitted_speed().parameters)
            .seconds;
    EXPECT_GE(seconds, last) << "batch " << batch;
    last = seconds;
  }
}

// AMP on tensor cores: the contiguous layout pays cuDNN's transposes; channels_last is faster.
TEST(SpeedModel, ChannelsLastIsFasterForAmpOnTensorCores) {
  training::StepShape shape;
  shape.model = models::ResNetOptions(50).stem(models::Stem::ImageNet).num_classes(1000);
  shape.image_size = 224;
  shape.batch = 256;
  shape.precision = Precision::FP16;
  for (const char* card : {"V100-16GB", "A100-80GB-SXM", "H100-SXM"}) {
    shape.channels_last = true;
    const double nhwc = images_per_second(shape, card);
    shape.channels_last = false;
    EXPECT_GT(nhwc, images_per_second(shape, card)) << card;
  }
}

// Accumulation: one micro-batch's operations, each run accumulate_steps times, and the gradients
// added after the first (one list, not one copy per micro-batch).
TEST(StepOperations, AccumulationRunsTheMicroBatchThatManyTimes) {
  training::StepShape shape;
  shape.model = cifar(18);
  const auto one = training::step_operations(shape);
  shape.accumulate_steps = 4;
  const auto four = training::step_operations(shape);
  EXPECT_EQ(four.size(), one.size() + 2);  // the gradients added, BatchNorm's buffers copied
  int64_t added = 0;
  for (const auto& op : four) {
    if (op.kind == OpKind::Convolution) {
      EXPECT_EQ(op.count, 4);
    }
    if (op.kind == OpKind::Gradients && op.kernels == 62) added = op.count;  // one a parameter
    if (op.pass == OpPass::Update) {
      EXPECT_EQ(op.count, 1);
    }
  }
  EXPECT_EQ(added, 3);
}

// The audit of 2026-12-07: BatchNorm's kernels are those of the backend ATen picks
// (_select_batch_norm_backend): cuDNN's one call each way in fp32 and fp16 (either layout), ATen's
// own in bf16: channels_last 3 forward and 2 backward, each reduction one more (its semaphores
// zeroed) where it spans more than one block row (above 1,792 values a channel: the stem's map at
// batch 2, 2 x 32 x 32, not layer4's, 2 x 4 x 4); contiguous 3 forward and one fused backward.
// They were 3 and 2 everywhere.
TEST(StepOperations, BatchNormLaunchesTheKernelsOfItsBackend) {
  training::StepShape shape;
  shape.model = cifar(18);
  shape.batch = 2;
  using Kernels = std::pair<int64_t, int64_t>;
  // The stem's BatchNorm and layer4's last, each forward and backward.
  auto kernels = [&](Precision precision, bool channels_last) {
    shape.precision = precision;
    shape.channels_last = channels_last;
    std::vector<int64_t> forward, backward;
    for (const auto& op : training::step_operations(shape)) {
      if (op.kind != OpKind::BatchNorm || op.bytes < 1000) continue;  // not the counter
      if (op.pass == OpPass::Forward) forward.push_back(op.kernels);
      if (op.pass == OpPass::Backward) backward.push_back(op.kernels);  // in reverse
    }
    EXPECT_EQ(forward.size(), 20u);
    EXPECT_EQ(backward.size(), 20u);
    return std::pair{Kernels{forward.front(), backward.back()},
                     Kernels{forward.back(), backward.front()}};
  };
  using Both = std::pair<Kernels, Kernels>;
  EXPECT_EQ(kernels(Precision::FP32, false), (Both{{1, 1}, {1, 1}}));
  EXPECT_EQ(kernels(Precision::FP32, true), (Both{{1, 1}, {1, 1}}));
  EXPECT_EQ(kernels(Precision::FP16, false), (Both{{1, 1}, {1, 1}}));
  EXPECT_EQ(kernels(Precision::FP16, true), (Both{{1, 1}, {1, 1}}));
  EXPECT_EQ(kernels(Precision::BF16, true), (Both{{4, 3}, {3, 2}}));
  EXPECT_EQ(kernels(Precision::BF16, false), (Both{{3, 1}, {3, 1}}));
}

// The max pool's backward zeroes the input's gradient and writes every element of it (CUDA's
// DilatedMaxPool2d): the input's gradient twice, the output's gradient and its int64 indices once.
TEST(StepOperations, TheMaxPoolsBackwardWritesTheWholeInputsGradient) {
  training::StepShape shape;
  shape.model = models::ResNetOptions(18).stem(models::Stem::ImageNet);
  shape.image_size = 64;
  shape.batch = 2;
  const double in = 2.0 * 64 * 32 * 32, out = 2.0 * 64 * 16 * 16;
  int pools = 0;
  for (const auto& op : training::step_operations(shape)) {
    if (op.kind != OpKind::Pooling || op.pass != OpPass::Backward || op.kernels != 2) continue;
    ++pools;
    EXPECT_DOUBLE_EQ(op.bytes, 2 * 4 * in + (4 + 8) * out);
  }
  EXPECT_EQ(pools, 1);
}

// What the trainer runs beside the model each step: its running sums of the loss and the correct
// predictions (7 kernels a micro-batch), BatchNorm's buffers copied before an accumulated step,
// the weight average's update, label smoothing's terms of the loss.
TEST(StepOperations, TheTrainersOwnWorkEachStepIsCounted) {
  training::StepShape shape;
  shape.model = cifar(18);
  shape.batch = 4;
  auto total_kernels = [](const std::vector<training::StepOperation>& ops) {
    int64_t kernels = 0;
    for (const auto& op : ops) kernels += op.kernels * op.count;
    return kernels;
  };
  const auto plain = training::step_operations(shape);
  int64_t sums = 0;
  for (const auto& op : plain) sums += op.kind == OpKind::Loss && op.kernels == 7 ? op.count : 0;
  EXPECT_EQ(sums, 1);
  shape.accumulate_steps = 2;
  const auto two = training::step_operations(shape);
  int64_t copies = 0;
  for (const auto& op : two) {
    if (op.kind == OpKind::BatchNorm && op.pass == OpPass::Forward && op.flops == 0) {
      copies += op.kernels * op.count;
    }
  }
  EXPECT_EQ(copies, 3 * 20);  // ResNet-18: 20 BatchNorm layers, 3 buffers each, once a step
  shape.accumulate_steps = 1;
  shape.weight_average = true;
  const auto averaged = training::step_operations(shape);
  ASSERT_EQ(averaged.size(), plain.size() + 1);
  const auto& lerp = averaged.back();
  EXPECT_EQ(lerp.pass, OpPass::Update);
  EXPECT_EQ(lerp.count, 1);
  // 11,173,962 parameters and 2 x 4,800 BatchNorm statistics, read twice and written once
  EXPECT_DOUBLE_EQ(lerp.bytes, 12.0 * (11173962 + 2 * 4800));
  EXPECT_GT(lerp.kernels, 20);  // the lerp's launches, then 20 integer counters copied
  shape.weight_average = false;
  shape.label_smoothing = true;
  EXPECT_EQ(total_kernels(training::step_operations(shape)), total_kernels(plain) + 16);
}

TEST(SpeedModel, AGraphCapturedStepIsNotEstimated) {
  training::Config config;
  config.model = cifar(18);
  config.training.cuda_graph = training::CudaGraphMode::On;
  try {
    training::predict_step(config, 8, training::find_card("H200"));
    FAIL() << "a captured step was estimated";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("training.cuda_graph: a graph-captured step", 0), 0u)
        << e.what();
  }
  config.training.cuda_graph = training::CudaGraphMode::Off;
  EXPECT_GT(training::predict_step(config, 8, training::find_card("H200")).images_per_second(), 0);
}

}  // namespace

// Thirteenth pass: a step barely launch-bound (the host 1.03x the GPU) said "a batch up to about
// 1.0x larger adds GPU work", no larger batch at all: below 1.1 the ratio has two decimals.
TEST(SpeedModel, TheLaunchBoundRatioIsNeverShownAsOne) {
  training::StepEstimate e;
  e.gpu_seconds = 0.0100;
  e.host_seconds = e.seconds = 0.0103;
  EXPECT_NE(e.why().find("a batch up to about 1.03x larger"), std::string::npos) << e.why();
  e.host_seconds = e.seconds = 0.0280;
  EXPECT_NE(e.why().find("a batch up to about 2.8x larger"), std::string::npos) << e.why();
}
