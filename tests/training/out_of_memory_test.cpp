#include "training/out_of_memory.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "training/parts/components.h"
#include "training/platform/memory.h"

namespace {

// A training step under a limit that the weights, their gradients and momentum alone exceed was
// told to take a smaller batch, bf16 or checkpointing and `train sweep --find-max`, none of which
// can help (following them ran out of memory again): it is told so, as checkpointing auto says.
TEST(OutOfMemory, ATrainingStepWhoseWeightsAloneExceedTheLimitIsToldSo) {
  training::Config config;
  config.memory.limit = int64_t{60} << 20;
  const training::OutOfMemoryWhere step{training::OutOfMemoryWhere::Training,
                                        "in epoch 1 after 0 steps", false, false};
  const int64_t held = training::held_whatever_the_batch(config).bytes;
  EXPECT_GE(held, 3 * training::gradient_bytes(config.model));  // and the BatchNorm buffers
  ASSERT_GT(held, config.memory.limit);
  const auto message = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_NE(message.find(". Remedies: the weights and their gradients and momentum alone take " +
                         training::format_bytes(held) + ": more memory or a smaller model.arch."),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("batch_size"), std::string::npos) << message;
  EXPECT_EQ(message.find("find-max"), std::string::npos) << message;
  // The remedy auto gives for the same limit is the same line (one function).
  EXPECT_NE(message.find(training::weights_alone_remedy(config, config.memory.limit)),
            std::string::npos);
  // Twelfth pass: a limit just above them (by less than one image's input and first convolution
  // output) was told a smaller batch, checkpointing or evaluation batch, which ran out of memory
  // the same way: it is told what is left, in training and in evaluation.
  const int64_t image = training::one_image_bytes(config);
  EXPECT_EQ(image, (3 * 32 * 32 + 64 * 32 * 32) * 4);  // the CIFAR stem, fp32
  config.memory.limit = held + image - 1;
  // Apart where they read alike: 268.00 KiB less a byte against 268.00 KiB.
  const auto [leaving, needs] = training::format_bytes_apart(image - 1, image);
  ASSERT_NE(leaving, needs);
  const training::OutOfMemoryWhere evaluation{training::OutOfMemoryWhere::Evaluation,
                                              "in the evaluation of epoch 1", false, false};
  for (const auto& where : {step, evaluation}) {
    const auto edge = training::out_of_memory_message(config, torch::kCPU, where, "");
    EXPECT_NE(edge.find(" alone take " + training::format_bytes(held) + " of it, leaving " +
                        leaving + ", less than one image's input and first convolution output (" +
                        needs + "): more memory or a smaller model.arch."),
              std::string::npos)
        << edge;
    EXPECT_EQ(edge.find("batch_size"), std::string::npos) << edge;
  }
  // Where one image fits beside them, the batch and the precision are the remedies.
  config.memory.limit = held + image;
  const auto room = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_NE(room.find("Remedies: a smaller training.batch_size (now "), std::string::npos) << room;
  EXPECT_EQ(room.find("alone take"), std::string::npos) << room;
}

// Fourteenth pass: with the ImageNet stem at 32x32 (layer4's map 1x1) a batch of 1 does not
// train, yet a limit between the weights with one image and with two was measured (both layouts
// timed) and told "a smaller training.batch_size (now 2)", which train then refused. The smallest
// batch that trains is what must fit, checked before anything is measured; no smaller batch is
// advised below it.
TEST(OutOfMemory, TheSmallestBatchThatTrainsIsWhatMustFitAndNoSmallerOneIsAdvised) {
  training::Config config;
  config.model.stem(models::Stem::ImageNet);
  config.training.batch_size = 2;
  ASSERT_EQ(models::smallest_trainable_batch(config.model, config.data.image_size), 2);
  const int64_t held = training::held_whatever_the_batch(config).bytes;
  const int64_t image = training::one_image_bytes(config);
  config.memory.limit = held + image + image / 2;  // one image fits, the smallest batch not
  try {
    training::refuse_what_no_batch_fits(config, torch::kCPU);
    ADD_FAILURE() << "a limit below the smallest batch that trains was let through";
  } catch (const training::OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find(
                  ", less than 2 images' (the smallest batch that trains: BatchNorm needs two "
                  "values a channel) input and first convolution output ("),
              std::string::npos)
        << e.what();
  }
  config.memory.limit =
      held + 4 * image;  // the batch fits its images; the step ran out all the same
  const training::OutOfMemoryWhere step{training::OutOfMemoryWhere::Training,
                                        "in epoch 1 after 0 steps", false, false};
  const auto message = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_EQ(message.find("a smaller training.batch_size"), std::string::npos) << message;
  EXPECT_EQ(message.find("find-max"), std::string::npos) << message;  // it finds no smaller one
  // Nor bf16, whose autocast copies beside the weights take more than the 4 images left.
  EXPECT_NE(message.find("Remedies: checkpointing.enabled: auto or true."), std::string::npos)
      << message;
  config.training.batch_size = 3;
  EXPECT_NE(training::out_of_memory_message(config, torch::kCPU, step, "")
                .find("Remedies: a smaller training.batch_size (now 3)"),
            std::string::npos);
}

// "checkpointing.enabled: auto or true" was offered whatever the limit; at batch 512 with 200 MiB
// beside the weights, ResNet-18's blocks' inputs alone (303,104 values an image: 592 MiB in fp32)
// exceed it, and auto then measured for nothing. It is offered where they fit, at batch 32.
TEST(OutOfMemory, CheckpointingIsOfferedOnlyWhereRecomputingEveryBlockCanFit) {
  training::Config config;
  config.model.depth(18);
  const training::OutOfMemoryWhere step{training::OutOfMemoryWhere::Training,
                                        "in epoch 1 after 0 steps", false, false};
  config.memory.limit = training::held_whatever_the_batch(config).bytes + (int64_t{200} << 20);
  config.training.batch_size = 512;
  auto message = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_EQ(message.find("checkpointing"), std::string::npos) << message;
  EXPECT_NE(message.find("Remedies: a smaller training.batch_size (now 512)"), std::string::npos)
      << message;
  config.training.batch_size = 32;
  message = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_NE(message.find(", checkpointing.enabled: auto or true"), std::string::npos) << message;
  // A captured step (training.cuda_graph: on) refuses checkpointing and fp16: neither is offered.
  config.training.cuda_graph = training::CudaGraphMode::On;
  message = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_EQ(message.find("checkpointing"), std::string::npos) << message;
  EXPECT_NE(message.find("training.precision: bf16 (now fp32)"), std::string::npos) << message;
  config.training.cuda_graph = training::CudaGraphMode::Auto;
  // The second micro-batch holds the first one's gradients beside the blocks' inputs.
  // (Batch 96: 136 MiB of inputs and blocks' inputs, the gradients 42.6 MiB.)
  const int64_t limit = training::held_whatever_the_batch(config).bytes + (int64_t{100} << 20);
  config.training.batch_size = 96;
  EXPECT_TRUE(training::every_block_recomputed_can_fit(config, limit));
  config.training.accumulate_steps = 2;
  EXPECT_FALSE(training::every_block_recomputed_can_fit(config, limit));
}

// Twelfth pass: "memory.limit 127.91 MiB: the weights ... alone take 127.91 MiB" (134,126,104
// bytes against 127.91 MiB): the two sides are written apart where they differ.
TEST(OutOfMemory, TheLimitAndWhatTheRunHoldsAreWrittenApart) {
  training::Config config;
  const int64_t held = training::held_whatever_the_batch(config).bytes;
  config.memory.limit = held - 1000;
  try {
    training::refuse_what_no_batch_fits(config, torch::kCPU);
    ADD_FAILURE() << "a limit below the weights was let through";
  } catch (const std::exception& e) {
    const auto [limit, taken] = training::format_bytes_apart(config.memory.limit, held);
    ASSERT_NE(limit, taken);
    EXPECT_EQ(std::string(e.what()), "memory.limit " + limit +
                                         ": the weights and their gradients and momentum alone "
                                         "take " +
                                         taken + ": more memory or a smaller model.arch");
  }
}

// With a weight average (training.ema_decay) its copy of the weights is held beside the step too,
// whatever the batch: a limit under the weights, gradients, momentum and the copy was told to take
// a smaller batch, bf16 or checkpointing (following them ran out of memory again). Counted in one
// place, and training.ema_decay: 0 offered where the rest fits.
TEST(OutOfMemory, TheWeightAverageIsCountedAmongWhatNoBatchLowers) {
  training::Config config;
  const training::OutOfMemoryWhere step{training::OutOfMemoryWhere::Training,
                                        "in epoch 1 after 0 steps", false, false};
  const int64_t plain = training::held_whatever_the_batch(config).bytes;
  config.training.ema_decay = 0.99;
  const auto held = training::held_whatever_the_batch(config);
  EXPECT_EQ(held.without_average, plain);
  EXPECT_GT(held.bytes - plain, training::gradient_bytes(config.model) - 1);  // weights + buffers
  config.memory.limit = (plain + held.bytes) / 2;
  const auto message = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_NE(message.find(". Remedies: the weights and their gradients and momentum and the weight "
                         "average (training.ema_decay) alone take " +
                         training::format_bytes(held.bytes) +
                         ": more memory, training.ema_decay: 0 or a smaller model.arch."),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("batch_size"), std::string::npos) << message;
  // Where the rest alone exceeds the limit, dropping the average is no remedy.
  config.memory.limit = plain - 1;
  const auto over = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_NE(over.find(" alone take " + training::format_bytes(held.bytes) +
                      ": more memory or a smaller model.arch."),
            std::string::npos)
      << over;
  // fp16's GradScaler holds its scale, growth tracker and inf flag whatever the batch (and, as
  // bf16, autocast's copies of the weights).
  config.training.precision = training::Precision::FP16;
  const auto in_fp16 = training::held_whatever_the_batch(config);
  EXPECT_EQ(in_fp16.bytes, held.bytes + 12 + in_fp16.casts);
}

// Eighth hostile pass: a step that ran out of memory at 1024x1024 images, or with a weight average
// it could drop, was told a smaller batch, bf16 or checkpointing, not what it had changed: the
// images' size and the average are remedies too, in train's line and in auto's "nothing fits".
TEST(OutOfMemory, TheImageSizeAndTheWeightAverageAreRemediesOfAStep) {
  training::Config config;
  config.memory.limit = training::held_whatever_the_batch(config).bytes * 3;
  const training::OutOfMemoryWhere step{training::OutOfMemoryWhere::Training,
                                        "in epoch 1 after 0 steps", false, false};
  auto message = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_EQ(message.find("data.image_size"), std::string::npos) << message;
  EXPECT_EQ(message.find("ema_decay"), std::string::npos) << message;
  config.data.image_size = 1024;
  config.training.ema_decay = 0.99;
  message = training::out_of_memory_message(config, torch::kCPU, step, "");
  EXPECT_NE(message.find(", a smaller data.image_size (now 1024), training.ema_decay: 0; "),
            std::string::npos)
      << message;
  // Not checkpointing: 128 images' blocks' inputs at 1024x1024 alone take far more than the limit.
  EXPECT_EQ(message.find("checkpointing"), std::string::npos) << message;
  // One list of a step's own remedies for train's line and checkpointing's (the batch and the
  // precision were written in both).
  const std::string batch = std::to_string(config.training.batch_size);
  EXPECT_EQ(training::step_remedies(config, int64_t{64} << 30),
            ", a smaller training.batch_size (now " + batch +
                "), training.precision: bf16 or fp16 (now fp32), a smaller data.image_size (now "
                "1024), training.ema_decay: 0");
  // Nineteenth pass, a helper: where one image is what does not fit beside what the run holds,
  // and where evaluation went down to one image, the image size was no remedy.
  training::Config large;
  large.data.image_size = 1024;
  const int64_t held = training::held_whatever_the_batch(large).bytes;
  EXPECT_NE(training::weights_alone_remedy(large, held + (1 << 20))
                .find(", a smaller data.image_size (now 1024) or a smaller model.arch"),
            std::string::npos);
  EXPECT_EQ(training::weights_alone_remedy(large, held - (1 << 20)).find("data.image_size"),
            std::string::npos);  // the weights alone do not fit: no image size helps
  large.memory.limit = held * 2;
  const training::OutOfMemoryWhere one{training::OutOfMemoryWhere::Evaluation,
                                       "in the evaluation of epoch 1 after 8 steps", true, true};
  message = training::out_of_memory_message(large, torch::kCPU, one, "");
  EXPECT_NE(message.find(", a smaller data.image_size (now 1024) or a smaller model.arch."),
            std::string::npos)
      << message;
  config.data.image_size = 16;  // already below the images as stored
  config.training.ema_decay = 0;
  config.training.precision = training::Precision::BF16;
  EXPECT_EQ(training::step_remedies(config, int64_t{64} << 30),
            ", a smaller training.batch_size (now " + batch + ")");
  // Eighteenth pass: accumulating, more micro-batches of fewer images were not offered; offered,
  // a split that keeps the images per optimizer step: the largest batch up to half that trains
  // and divides them (a hostile helper: 3 x 3 was told to keep 9 images, which batch 2 cannot).
  config.training.accumulate_steps = 4;
  config.training.batch_size = 96;
  EXPECT_EQ(training::step_remedies(config, int64_t{64} << 30),
            ", a smaller training.batch_size (now 96), e.g. 48 with training.accumulate_steps 8 "
            "(now 4) to keep the images per optimizer step");
  config.training.batch_size = 5;  // 20 images: 2 with 10 (4 with 5 is more than half of 5)
  EXPECT_EQ(training::step_remedies(config, int64_t{64} << 30),
            ", a smaller training.batch_size (now 5), e.g. 2 with training.accumulate_steps 10 "
            "(now 4) to keep the images per optimizer step");
  config.training.batch_size = 65537;  // 2 x 65537 images: 1 or 2 would take too many steps
  config.training.accumulate_steps = 2;
  EXPECT_EQ(training::step_remedies(config, int64_t{64} << 30),
            ", a smaller training.batch_size (now 65537)");
  training::Config imagenet = config;  // its smallest batch that trains at 32x32 is 2
  imagenet.model.stem(models::Stem::ImageNet);
  imagenet.training.batch_size = 3;
  imagenet.training.accumulate_steps = 3;
  EXPECT_EQ(training::step_remedies(imagenet, int64_t{64} << 30),
            ", a smaller training.batch_size (now 3)");
  config.training.accumulate_steps = 1;
  config.training.batch_size = std::stoll(batch);
  // Fifteenth pass: bf16 was offered where autocast's copies beside the weights leave no room
  // under the limit (and bf16 then offered fp32): only where they fit.
  config.training.precision = training::Precision::FP32;
  training::Config half = config;
  half.training.precision = training::Precision::BF16;
  const int64_t between = (training::held_whatever_the_batch(config).bytes +
                           training::held_whatever_the_batch(half).bytes) /
                          2;
  ASSERT_FALSE(training::weights_alone_remedy(half, between).empty());
  EXPECT_EQ(training::step_remedies(config, between).find("bf16"), std::string::npos);
}

// An evaluation that ran out of memory at one image per forward pass (it halves its passes before
// it gives up) was told to take a smaller training.eval_batch_size, which cannot help; that remedy
// stays for the evaluation batch itself.
TEST(OutOfMemory, AnEvaluationDownToOneImageIsNotToldToShrinkItsBatch) {
  training::Config config;
  config.training.precision = training::Precision::BF16;
  // Room for more than one image beside what the run holds (else that is the remedy, above).
  config.memory.limit = training::held_whatever_the_batch(config).bytes + (int64_t{8} << 20);
  const training::OutOfMemoryWhere batch{training::OutOfMemoryWhere::Evaluation,
                                         "in the evaluation of epoch 1 after 8 steps", true, false};
  const auto making = training::out_of_memory_message(config, torch::kCPU, batch, "");
  EXPECT_NE(making.find("a smaller training.eval_batch_size (now 500"), std::string::npos)
      << making;
  // A fresh run's probe before its first step has no checkpoint to be intact.
  auto fresh = batch;
  fresh.checkpointed = false;
  const auto probe = training::out_of_memory_message(config, torch::kCPU, fresh, "");
  EXPECT_EQ(probe.find("checkpoint is intact"), std::string::npos) << probe;
  EXPECT_NE(probe.find("in the evaluation of epoch 1"), std::string::npos) << probe;
  auto one = batch;
  one.one_image = true;
  // A hostile helper: in bf16 evaluation down to one image offered only more memory, where fp32
  // (without autocast's copies of the weights) trained at the same limit.
  const auto message = training::out_of_memory_message(config, torch::kCPU, one, "");
  EXPECT_EQ(message.find("eval_batch_size"), std::string::npos) << message;
  EXPECT_NE(message.find("evaluation went down to one image per forward pass, beside what "
                         "training holds (the weights, the optimizer's "
                         "momentum, autocast's copies of the weights): more memory "
                         "(memory.limit), training.precision: fp32 or a smaller model.arch. The "
                         "last checkpoint is intact."),
            std::string::npos)
      << message;
  // What it names is what this run holds and can give up: no momentum without one; the
  // device-resident data is a remedy.
  config.optimizer.momentum(0);
  config.optimizer.nesterov(false);
  config.data.device_resident = true;
  const auto plain = training::out_of_memory_message(config, torch::kCPU, one, "");
  EXPECT_NE(plain.find("(the weights, autocast's copies of the weights): more "
                       "memory (memory.limit), training.precision: fp32, data.device_resident: "
                       "false or a smaller model.arch."),
            std::string::npos)
      << plain;
  // The gradients are freed before the evaluation, but a graph-captured step's.
  one.gradients = true;
  const auto graphed = training::out_of_memory_message(config, torch::kCPU, one, "");
  EXPECT_NE(graphed.find("(the weights, their gradients, autocast's copies of the weights): more "),
            std::string::npos)
      << graphed;
}

}  // namespace

// Thirteenth pass: in bf16 autocast's copies of the convolution and linear weights are held
// whatever the batch (a limit between fp32's count and bf16's was measured, then ran out at one
// image). A sweep of several precisions is refused only where none fits, offering fp32 in the
// command's own words; and only where fp32's own image (4-byte stem output) fits too.
TEST(OutOfMemory, AutocastsCopiesAreHeldWhateverTheBatchAndAStudyIsRefusedWhereNoSettingFits) {
  training::Config fp32;
  fp32.training.precision = training::Precision::FP32;
  training::Config bf16 = fp32;
  bf16.training.precision = training::Precision::BF16;
  const auto in_fp32 = training::held_whatever_the_batch(fp32);
  const auto in_bf16 = training::held_whatever_the_batch(bf16);
  EXPECT_EQ(in_fp32.casts, 0);
  EXPECT_GT(in_bf16.casts, 0);
  EXPECT_EQ(in_bf16.bytes, in_fp32.bytes + in_bf16.casts);
  const int64_t limit = in_fp32.bytes + training::one_image_bytes(fp32);  // fp32 fits, bf16 not
  fp32.memory.limit = bf16.memory.limit = limit;
  EXPECT_NO_THROW(training::refuse_unless_one_fits({bf16, fp32}, torch::kCPU, "--precisions fp32"));
  try {
    training::refuse_unless_one_fits({bf16}, torch::kCPU, "--precisions fp32");
    ADD_FAILURE() << "bf16 below its weights' copies was not refused";
  } catch (const training::OutOfMemory& e) {
    const std::string line = e.what();
    EXPECT_NE(line.find("and autocast's bf16 copies of them alone take"), std::string::npos)
        << line;
    EXPECT_NE(line.find(", --precisions fp32 or a smaller model.arch"), std::string::npos) << line;
  }
  bf16.memory.limit = limit - 1;  // fp32's own image no longer fits: not offered
  try {
    training::refuse_what_no_batch_fits(bf16, torch::kCPU);
    ADD_FAILURE() << "refused nothing";
  } catch (const training::OutOfMemory& e) {
    EXPECT_EQ(std::string(e.what()).find("precision fp32"), std::string::npos) << e.what();
  }
}

namespace {

// A measurement (the stand-in for measure_blocks) whose step with every block recomputed peaks at
// `recomputed(batch)` and whose plain step at `plain(batch)` (one block keeping the difference);
// the batches it was asked for.
training::MeasureBlocks measured(std::function<int64_t(int64_t)> recomputed,
                                 std::function<int64_t(int64_t)> plain,
                                 std::vector<int64_t>* batches) {
  return [=](const training::Config& config, const torch::Device&) {
    const int64_t batch = config.training.batch_size;
    batches->push_back(batch);
    training::BlockMeasurement m;
    m.blocks.push_back({"layer1.0", plain(batch) - recomputed(batch), 0.0});
    m.windows.push_back({"backward layer1.0", recomputed(batch), 1});
    return m;
  };
}

// Sixteenth pass: where the step holds more than its weights whatever the batch (oneDNN's scratch
// in a convolution's weight gradient: a 36.02 MiB request at batches 16, 8, 4 and 2 alike,
// ResNet-18 under 140 MiB), train's out-of-memory line advised a smaller batch, --find-max and
// checkpointing, none of which fit; a hostile helper then found checkpointing offered at the
// smallest batch, and at the run's batch, where it did not fit either. Once the run's state is
// freed, a step at the smallest batch that trains is measured with every block recomputed (its
// plain step predicted from it), and the run's batch recomputed where that fits: each remedy is
// offered where its step fits, and where none does the figure measured is said.
TEST(OutOfMemory, ASmallerBatchOrCheckpointingIsOfferedOnlyWhereItsStepMeasuredFits) {
  training::Config config;
  config.model.depth(18);
  config.training.batch_size = 16;
  const int64_t limit = training::held_whatever_the_batch(config).bytes + (int64_t{100} << 20);
  config.memory.limit = limit;
  const training::OutOfMemoryWhere step{training::OutOfMemoryWhere::Training,
                                        "in epoch 1 after 0 steps", true, false};
  const std::string unconfirmed = training::out_of_memory_message(config, torch::kCPU, step, "");
  ASSERT_NE(unconfirmed.find("a smaller training.batch_size (now 16)"), std::string::npos);
  ASSERT_NE(unconfirmed.find("checkpointing.enabled: auto or true"), std::string::npos);
  const auto confirmed = [&](const training::Config& at, int64_t recomputed_small,
                             int64_t plain_small, int64_t recomputed_own,
                             std::vector<int64_t>* batches) {
    try {
      training::throw_out_of_memory(at, torch::kCPU, step, "");
    } catch (const training::UnconfirmedOutOfMemory& e) {
      EXPECT_EQ(e.what(), training::out_of_memory_message(at, torch::kCPU, step, ""));
      const int64_t own = at.training.batch_size;
      return training::confirmed_out_of_memory(
          e, measured([=](int64_t b) { return b == own ? recomputed_own : recomputed_small; },
                      [=](int64_t b) { return b == own ? recomputed_own + 1 : plain_small; },
                      batches));
    }
    ADD_FAILURE() << "not an UnconfirmedOutOfMemory";
    return std::string();
  };
  const int64_t auto_budget = training::checkpointing_budget(config, torch::kCPU).bytes;
  std::vector<int64_t> batches;
  // Everything fits (within auto's budget): the line as it was; the smallest batch (1 with the
  // CIFAR stem) measured, then the run's.
  EXPECT_EQ(confirmed(config, 1000, 2000, auto_budget, &batches), unconfirmed);
  EXPECT_EQ(batches, (std::vector<int64_t>{1, 16}));
  // The run's batch recomputed fits the limit, not auto's budget: `true` alone.
  std::string line = confirmed(config, 1000, 2000, auto_budget + 1, &batches);
  EXPECT_NE(line.find("a smaller training.batch_size (now 16), training.precision: bf16 or fp16 "
                      "(now fp32), checkpointing.enabled: true; a sweep's --find-max"),
            std::string::npos)
      << line;
  // The run's batch recomputed above the limit: a smaller batch, no checkpointing.
  line = confirmed(config, 1000, 2000, limit + 1, &batches);
  EXPECT_EQ(line.find("checkpointing"), std::string::npos) << line;
  EXPECT_NE(line.find("a smaller training.batch_size (now 16)"), std::string::npos) << line;
  // A smaller batch fits only recomputed: said so, without --find-max.
  line = confirmed(config, 1000, limit + 1, limit + 1, &batches);
  EXPECT_NE(line.find("training.precision: bf16 or fp16 (now fp32), a smaller training.batch_size "
                      "with checkpointing.enabled: true. The last checkpoint is intact."),
            std::string::npos)
      << line;
  // Nothing fits at the smallest batch: none of them, the figure said; the run's batch is not
  // measured.
  batches.clear();
  line = confirmed(config, limit + 1, limit + 2, 0, &batches);
  EXPECT_EQ(batches, (std::vector<int64_t>{1}));
  const auto [peak, limit_text] = training::format_bytes_apart(limit + 1, limit);
  EXPECT_NE(line.find(". Remedies: training.precision: bf16 or fp16 (now fp32), or more memory "
                      "(memory.limit); no smaller batch or checkpointing fits: a step of one image "
                      "with every block recomputed peaks at " +
                      peak + ", above the limit " + limit_text +
                      " (measured). The last checkpoint is intact."),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("batch_size"), std::string::npos) << line;
  EXPECT_EQ(line.find("find-max"), std::string::npos) << line;
  // At the smallest batch already, checkpointing is measured there (it was offered unmeasured).
  training::Config at_one = config;
  at_one.training.batch_size = 1;
  batches.clear();
  line = confirmed(at_one, 0, 0, limit + 1, &batches);
  EXPECT_EQ(batches, (std::vector<int64_t>{1}));
  EXPECT_NE(line.find("no smaller batch or checkpointing fits: a step of one image with every "
                      "block recomputed peaks at"),
            std::string::npos)
      << line;
  // Out of memory while measuring: said; a stop (any other failure): the line as it was.
  try {
    training::throw_out_of_memory(config, torch::kCPU, step, "");
  } catch (const training::UnconfirmedOutOfMemory& e) {
    const auto out_of_memory = [](const training::Config&,
                                  const torch::Device&) -> training::BlockMeasurement {
      throw training::OutOfMemory("tried to allocate 1 B");
    };
    EXPECT_NE(training::confirmed_out_of_memory(e, out_of_memory)
                  .find("fits: a step of one image with every block recomputed runs out of memory "
                        "too (measured)."),
              std::string::npos);
    const auto stopped = [](const training::Config&,
                            const torch::Device&) -> training::BlockMeasurement {
      throw std::runtime_error("stopped");
    };
    EXPECT_EQ(training::confirmed_out_of_memory(e, stopped), unconfirmed);
  }
}

// Where neither a smaller batch nor checkpointing is offered (the weights alone exceed the limit,
// or the evaluation), the line is final: nothing is measured.
TEST(OutOfMemory, OnlyALineOfferingASmallerBatchOrCheckpointingIsConfirmed) {
  training::Config config;
  config.memory.limit = int64_t{60} << 20;  // below ResNet-50's weights and state
  const training::OutOfMemoryWhere step{training::OutOfMemoryWhere::Training, "in epoch 1", false,
                                        false};
  const training::OutOfMemoryWhere evaluation{training::OutOfMemoryWhere::Evaluation,
                                              "in the evaluation of epoch 1", false, false};
  for (const auto& [limit, where] :
       {std::pair{config.memory.limit, step}, std::pair{int64_t{1} << 40, evaluation}}) {
    config.memory.limit = limit;
    try {
      training::throw_out_of_memory(config, torch::kCPU, where, "");
    } catch (const training::UnconfirmedOutOfMemory&) {
      ADD_FAILURE() << where.text;
    } catch (const training::OutOfMemory& e) {
      EXPECT_EQ(e.what(), training::out_of_memory_message(config, torch::kCPU, where, ""));
    }
  }
}

}  // namespace
