#include "training/loop/trainer.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <thread>

#include "test_support.h"
#include "training/parts/checkpoint_choice.h"
#include "training/platform/errors.h"
#include "training/platform/heartbeat.h"
#include "training/platform/memory.h"
#include "training/platform/stop_signal.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// A small, fast CPU setup: ResNet-18 with the ImageNet stem on 160 synthetic images, 5 batches
// of 32 per epoch, a step schedule (its curve does not depend on the run's length).
training::Config tiny_config() {
  auto c = training::parse_config(R"(
model: {arch: resnet18, stem: imagenet}
data: {source: synthetic, synthetic_train_size: 160, synthetic_test_size: 64}
training: {device: cpu, epochs: 4, batch_size: 32, eval_batch_size: 64, log_every_steps: 2, seed: 3}
optimizer: {lr: 0.05}
schedule: {name: step, milestones: [3], gamma: 0.5, warmup_epochs: 1}
)",
                                  "tiny");
  return c;
}

data::Split split_for(const training::Config& c, data::SplitName which) {
  auto options = c.data.dataset;
  options.synthetic_seed(static_cast<uint64_t>(c.training.seed));
  return data::load_split(options, which);
}

// Trains with `config` in `dir`, resuming from `resume_from` if given; returns the metrics rows.
std::vector<ordered_json> run(const training::Config& config, const fs::path& dir,
                              const fs::path& resume_from = {}, bool resuming_dir = false) {
  training::RunDirectory run_dir(dir, resuming_dir);
  training::Trainer trainer(config, torch::kCPU, split_for(config, data::SplitName::Train),
                            split_for(config, data::SplitName::Test));
  trainer.write_to(run_dir);
  if (!resume_from.empty()) trainer.resume(resume_from);
  trainer.fit();
  std::vector<ordered_json> rows;
  for (const auto& record : run_dir.epochs()) rows.push_back(training::to_json(record));
  return rows;
}

// Everything but wall-clock figures must match exactly.
void expect_same_metrics(const std::vector<ordered_json>& a, const std::vector<ordered_json>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* key :
         {"epoch", "step", "lr", "train_loss", "train_acc", "test_loss", "test_acc"}) {
      EXPECT_EQ(a[i].at(key), b[i].at(key)) << "epoch " << i + 1 << " " << key;
    }
  }
}

TEST(Trainer, ReproducibleFromTheSeed) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 1;
  expect_same_metrics(run(config, dir / "a"), run(config, dir / "b"));
}

TEST(Trainer, ResumeAtAnEpochBoundaryMatchesAStraightRun) {
  test_support::TempDir dir;
  const auto straight = run(tiny_config(), dir / "straight");
  ASSERT_EQ(straight.size(), 4u);

  auto first_half = tiny_config();
  first_half.training.epochs = 2;
  EXPECT_EQ(run(first_half, dir / "resumed").size(), 2u);
  const auto resumed = run(tiny_config(), dir / "resumed", dir / "resumed/checkpoint.pt", true);
  expect_same_metrics(straight, resumed);
  // The loss really moved, so equality is not trivial.
  EXPECT_NE(straight.front().at("train_loss"), straight.back().at("train_loss"));
}

TEST(Trainer, ResumeMidEpochAfterMaxStepsMatchesAStraightRun) {
  test_support::TempDir dir;
  const auto straight = run(tiny_config(), dir / "straight");
  auto cut = tiny_config();
  cut.training.max_steps = 7;  // epoch 2, batch 2 of 5
  const auto partial = run(cut, dir / "resumed");
  ASSERT_EQ(partial.size(), 2u);
  EXPECT_EQ(partial.back().at("step"), 7);
  const auto resumed = run(tiny_config(), dir / "resumed", dir / "resumed/checkpoint.pt", true);
  expect_same_metrics(straight, resumed);
}

TEST(Trainer, AStopSignalCheckpointsAndTheRunContinuesExactly) {
  test_support::TempDir dir;
  const auto straight = run(tiny_config(), dir / "straight");
  {
    training::RunDirectory run_dir(dir / "stopped", false);
    auto config = tiny_config();
    training::Trainer trainer(config, torch::kCPU, split_for(config, data::SplitName::Train),
                              split_for(config, data::SplitName::Test));
    trainer.write_to(run_dir);
    training::request_stop();
    EXPECT_EQ(trainer.fit(), training::FitEnd::Stopped);
    training::clear_stop_request();
    EXPECT_TRUE(fs::exists(dir / "stopped/checkpoint.pt"));
    EXPECT_TRUE(run_dir.epochs().empty());
  }
  expect_same_metrics(straight,
                      run(tiny_config(), dir / "stopped", dir / "stopped/checkpoint.pt", true));
}

// The tiny config for 2 epochs with training.accumulate_steps 2.
training::Config accumulating_config() {
  auto config = tiny_config();
  config.training.epochs = 2;
  config.training.accumulate_steps = 2;
  return config;
}

// training.accumulate_steps 2 on 5 batches of 32: 2 optimizer steps of 64 images per epoch (the
// fifth batch, an incomplete group, is dropped), recorded as such.
// The evaluation probe before the first step ran beside the weights alone; evaluation runs after
// training's updates, beside their momentum (a run whose checkpointing auto fitted trained a whole
// epoch and ran out of memory evaluating it). The probe holds what the first update adds: a
// momentum buffer per parameter, nothing once they exist. Nineteenth pass: the evaluation held
// the last step's gradients too, which made it need more than the step (bf16 at batch 2 peaked at
// 130.0 MiB training and 154.8 MiB evaluating, so the bf16 that an fp32 run out of memory was
// offered ran out of memory evaluating one image); they are freed before it.
TEST(Trainer, TheEvaluationProbeHoldsWhatTheFirstUpdateAdds) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.max_steps = 1;
  auto bytes = [](const std::vector<torch::Tensor>& tensors) {
    int64_t total = 0;
    for (const auto& t : tensors) total += t.nbytes();
    return total;
  };
  for (const double momentum : {0.9, 0.0}) {
    config.optimizer.momentum(momentum);
    config.optimizer.nesterov(momentum > 0);
    training::RunDirectory run_dir(dir / ("m" + std::to_string(momentum > 0)), false);
    training::Trainer trainer(config, torch::kCPU, split_for(config, data::SplitName::Train),
                              split_for(config, data::SplitName::Test));
    trainer.write_to(run_dir);
    int64_t weights = 0;
    for (const auto& p : trainer.model()->parameters()) weights += p.nbytes();
    EXPECT_EQ(bytes(trainer.held_from_the_first_update()), (momentum > 0 ? 1 : 0) * weights);
    trainer.fit();
    EXPECT_EQ(bytes(trainer.held_from_the_first_update()), 0);
    for (const auto& p : trainer.model()->parameters()) EXPECT_FALSE(p.grad().defined());
  }
}

// A run with nothing left to train (resumed after its last epoch) evaluates nothing, so it probes
// nothing: no gradient or momentum is held for an update that never comes. Under a limit that
// leaves no room for them it finishes.
TEST(Trainer, ARunWithNothingToTrainProbesNothing) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 1;
  ASSERT_EQ(run(config, dir / "run").size(), 1u);
  config.memory.limit = int64_t{1} << 40;  // bounded: the probe would run if anything trained
  training::RunDirectory run_dir(dir / "run", true);
  training::Trainer trainer(config, torch::kCPU, split_for(config, data::SplitName::Train),
                            split_for(config, data::SplitName::Test));
  trainer.write_to(run_dir);
  trainer.resume(dir / "run/checkpoint.pt");
  auto& allocator = training::TrackingCpuAllocator::instance();
  allocator.set_limit(allocator.stats().allocated + (int64_t{1} << 20));
  training::FitEnd end = training::FitEnd::Stopped;
  EXPECT_NO_THROW(end = trainer.fit());
  allocator.set_limit(0);
  EXPECT_EQ(end, training::FitEnd::Finished);
}

TEST(Trainer, AccumulationCountsOptimizerStepsAndDropsTheIncompleteGroup) {
  test_support::TempDir dir;
  auto config = accumulating_config();
  const auto rows = run(config, dir / "run");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("step"), 2);
  EXPECT_EQ(rows[1].at("step"), 4);
  EXPECT_EQ(rows[0].at("batches"), 4);
  EXPECT_EQ(rows[0].at("epoch_batches"), 4);
  EXPECT_EQ(rows[0].at("accumulate_steps"), 2);
  EXPECT_EQ(rows[0].at("effective_batch_size"), 64);
  // A group of 2 batches of 32 is another run than 1 batch of 32.
  config.training.accumulate_steps = 1;
  const auto plain = run(config, dir / "plain");
  EXPECT_EQ(plain[0].at("step"), 5);
  EXPECT_EQ(plain[0].at("effective_batch_size"), 32);
}

// Trains `config` in `dir` until a stop signal arrives before micro-batch 2 of step 2 (training
// alone: the group is abandoned); the trainer's state after the stop.
training::TrainState stop_inside_step_2(const training::Config& config, const fs::path& dir) {
  training::RunDirectory run_dir(dir, false);
  training::Trainer trainer(config, torch::kCPU, split_for(config, data::SplitName::Train),
                            split_for(config, data::SplitName::Test));
  trainer.write_to(run_dir);
  ::setenv("TRAIN_TEST_STOP_AT", "step 2 micro-batch 2", 1);
  const auto end = trainer.fit();
  ::unsetenv("TRAIN_TEST_STOP_AT");
  training::clear_stop_request();
  EXPECT_EQ(end, training::FitEnd::Stopped);
  return trainer.state();
}

// A stop signal between two micro-batches of a group restarts that group on resume (its
// BatchNorm statistics put back, its gradients never applied): the resumed run ends as the
// uninterrupted one.
TEST(Trainer, AStopInsideAnAccumulationGroupResumesExactly) {
  test_support::TempDir dir;
  auto config = accumulating_config();
  const auto straight = run(config, dir / "straight");
  const auto stopped = stop_inside_step_2(config, dir / "stopped");
  EXPECT_EQ(stopped.step, 1);
  EXPECT_EQ(stopped.batch_in_epoch, 2);  // the group of batches 3 and 4 starts again
  expect_same_metrics(straight, run(config, dir / "stopped", dir / "stopped/checkpoint.pt", true));
  // A mid-epoch resume at another grouping is refused, naming the key.
  stop_inside_step_2(config, dir / "stopped2");
  auto regrouped = config;
  regrouped.training.accumulate_steps = 1;
  training::RunDirectory again(dir / "stopped2", true);
  training::Trainer trainer(regrouped, torch::kCPU, split_for(config, data::SplitName::Train),
                            split_for(config, data::SplitName::Test));
  trainer.write_to(again);
  try {
    trainer.resume(dir / "stopped2/checkpoint.pt");
    FAIL() << "expected a KeyError";
  } catch (const training::KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("Resume with training.accumulate_steps=2"),
              std::string::npos)
        << e.what();
  }
}

// An evaluation that runs past the heartbeat's first interval says where it is (batches done of
// the split's, images/s, time left). The interval is shortened here to a millisecond, so that
// these 64 test images in 4 batches of 16 are such an evaluation; at the default 10 s they print
// nothing (Heartbeat.APhasePastTheFirstIntervalSaysWhereItIsAndAShortOneSaysNothing).
TEST(Trainer, AnEvaluationPastTheFirstIntervalSaysWhereItIs) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 1;
  config.training.eval_batch_size = 16;
  spdlog::default_logger()->flush_on(spdlog::level::trace);  // as train's own logger does
  training::Heartbeat::set_intervals(0.001, 0.001);
  run(config, dir / "run");
  training::Heartbeat::set_intervals(0, 0);
  const auto log = test_support::read_text(dir / "run/train.log");
  EXPECT_NE(log.find("evaluation: "), std::string::npos) << log;
  EXPECT_NE(log.find("/4 batches"), std::string::npos) << log;
}

// Training's first steps, before the first progress line (3 steps and 10 s), are covered by a
// heartbeat: a step longer than its first interval (shortened here to a millisecond) is not
// silent. At the default 10 s these 5 steps print nothing of it.
TEST(Trainer, TheFirstStepsBeforeAProgressLineSayWhereTrainingIs) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 1;
  config.training.log_every_steps = 1000;
  spdlog::default_logger()->flush_on(spdlog::level::trace);
  training::Heartbeat::set_intervals(0.001, 0.001);
  run(config, dir / "run");
  training::Heartbeat::set_intervals(0, 0);
  const auto log = test_support::read_text(dir / "run/train.log");
  EXPECT_NE(log.find("training: epoch 1: "), std::string::npos) << log;
  EXPECT_NE(log.find("/5 steps"), std::string::npos) << log;
}

// A long CPU run is projected as soon as 3 steady steps give a rate: after step 8 (5 warm-up
// steps), not at the first log interval (log_every_steps is 1000 here). The run is planned for
// 500,000 steps; it is stopped once the projection is in train.log.
TEST(Trainer, ALongCpuRunIsProjectedAfterThreeSteadySteps) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 100000;
  config.training.log_every_steps = 1000;
  spdlog::default_logger()->flush_on(spdlog::level::trace);  // as train's own logger does
  training::RunDirectory run_dir(dir / "long", false);
  training::Trainer trainer(config, torch::kCPU, split_for(config, data::SplitName::Train),
                            split_for(config, data::SplitName::Test));
  trainer.write_to(run_dir);
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    for (int i = 0; i < 6000 && !done; ++i) {
      if (test_support::read_text(dir / "long/train.log").find("steps take about") !=
          std::string::npos) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    training::request_stop();
  });
  const auto end = trainer.fit();
  done = true;
  watcher.join();
  training::clear_stop_request();
  EXPECT_EQ(end, training::FitEnd::Stopped);
  const std::string log = test_support::read_text(dir / "long/train.log");
  EXPECT_NE(log.find("the remaining 499992 steps take about"), std::string::npos) << log;
}

TEST(Trainer, ChannelsLastTrainsToTheSameLosses) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 1;
  // A few gentle steps: with large steps on random labels, rounding differences between the
  // layouts grow chaotically, which says nothing about the layout.
  config.training.max_steps = 3;
  config.optimizer.lr(0.001);
  const auto plain = run(config, dir / "plain");
  config.training.memory_format = c10::MemoryFormat::ChannelsLast;
  const auto nhwc = run(config, dir / "nhwc");
  // Same math in another layout: equal up to float summation order.
  EXPECT_NEAR(plain[0].at("train_loss").get<double>(), nhwc[0].at("train_loss").get<double>(),
              1e-3);
  EXPECT_NEAR(plain[0].at("test_loss").get<double>(), nhwc[0].at("test_loss").get<double>(),
              1e-3 * std::abs(plain[0].at("test_loss").get<double>()));
}

TEST(Trainer, DeviceResidentDataGivesTheSameRun) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 1;
  const auto host = run(config, dir / "host");
  config.data.device_resident = true;
  expect_same_metrics(host, run(config, dir / "resident"));
}

// data.loader: torch_data trains through LibTorch's loader: the same epochs of the same samples
// (its crops and flips are its own); an epoch cannot be resumed in the middle.
// torch_data cannot continue an epoch part-way, so a run stopped inside an epoch keeps the last
// epoch's checkpoint (it used to write a mid-epoch one that --resume then refused): the resume
// starts epoch 2 again and finishes. (A mid-epoch checkpoint of an older version is refused in
// resume(); none is written any more.)
TEST(Trainer, TorchDataLoaderTrainsAndKeepsTheEpochsCheckpointWhenStoppedInsideAnEpoch) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 2;
  config.training.max_steps = 7;  // epoch 2, batch 2 of 5
  config.data.loader = training::LoaderKind::TorchData;
  const auto rows = run(config, dir / "run");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows.back().at("step"), 7);
  EXPECT_TRUE(std::isfinite(rows.back().at("train_loss").get<double>()));
  config.training.max_steps = 0;
  const auto resumed = run(config, dir / "run", dir / "run/checkpoint.pt", true);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed.back().at("step"), 10);
}

TEST(Trainer, RefusesABatchLargerThanTheTrainingSet) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.batch_size = 1000;
  EXPECT_THROW(run(config, dir / "r"), training::UserError);
}

// An epoch's last partial batch is dropped: with ResNet's ImageNet stem at 32x32 (layer4 1x1) a
// last batch of one image would stop training ("Expected more than 1 value per channel when
// training"). The evaluation's last batch of one image is kept and runs (BatchNorm in eval mode
// uses its running statistics). Both loaders.
TEST(Trainer, ALastBatchOfOneImageIsDroppedAndTheEvaluationsIsKept) {
  for (const std::string loader : {"batched", "torch_data"}) {
    test_support::TempDir dir;
    auto config = tiny_config();
    config.data.loader =
        loader == "batched" ? training::LoaderKind::Batched : training::LoaderKind::TorchData;
    config.data.dataset.synthetic_train_size(2 * 32 + 1);  // 2 batches and 1 image
    config.data.dataset.synthetic_test_size(64 + 1);       // 1 batch of 64 and 1 image
    config.training.epochs = 2;
    const auto rows = run(config, dir / "r");
    ASSERT_EQ(rows.size(), 2u) << loader;
    EXPECT_EQ(rows.back().at("step"), 4) << loader;  // 2 steps an epoch: the image left out
    EXPECT_EQ(rows.back().at("epoch_batches"), 2) << loader;
    EXPECT_TRUE(std::isfinite(rows.back().at("test_loss").get<double>())) << loader;
  }
}

TEST(Trainer, RefusesLabelsBeyondNumClasses) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.model.num_classes(5);
  try {
    run(config, dir / "r");
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "model.num_classes: the training split has labels up to 9, so num_classes must be "
              "at least 10, got 5");
  }
}

TEST(Trainer, WritesEveryMetricColumnAndACheckpoint) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 1;
  const auto rows = run(config, dir / "r");
  ASSERT_EQ(rows.size(), 1u);
  for (const char* key : {"epoch", "step", "lr", "train_loss", "train_acc", "test_loss", "test_acc",
                          "epoch_seconds", "eval_seconds", "images_per_second"}) {
    EXPECT_TRUE(rows[0].contains(key)) << key;
  }
  EXPECT_EQ(rows[0].at("step"), 5);
  EXPECT_GT(rows[0].at("images_per_second").get<double>(), 0.0);
  EXPECT_TRUE(fs::exists(dir / "r/checkpoint.pt"));
}

// The first Trainer::kWarmupSteps steps of a process are timed apart: 5 batches per epoch, so
// epoch 1 is all warm-up (no steady rate) and epoch 2 all steady. A run resumed at the epoch
// boundary warms up again in its first epoch; one stopped by max_steps after 7 steps records the
// part epoch with 2 of its 5 batches, from which train report projects the whole epoch.
TEST(Trainer, WarmUpStepsAreTimedApartFromTheSteadyRate) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.epochs = 2;
  auto rows = run(config, dir / "r");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("warmup_steps"), 5);
  EXPECT_DOUBLE_EQ(rows[0].at("warmup_seconds").get<double>(),
                   rows[0].at("epoch_seconds").get<double>());
  EXPECT_TRUE(rows[0].at("steady_images_per_second").is_null());
  EXPECT_EQ(rows[1].at("warmup_steps"), 0);
  EXPECT_EQ(rows[1].at("warmup_seconds"), 0.0);
  EXPECT_GT(rows[1].at("steady_images_per_second").get<double>(), 0.0);
  EXPECT_EQ(rows[1].at("batches"), 5);
  EXPECT_EQ(rows[1].at("epoch_batches"), 5);

  config.training.epochs = 4;
  config.training.max_steps = 7;
  rows = run(config, dir / "stopped");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].at("batches"), 2);
  EXPECT_EQ(rows[1].at("epoch_batches"), 5);
  const auto part = training::epoch_record_from_json(rows[1], "row 2");
  const auto time = training::epoch_time(part);
  ASSERT_TRUE(time.has_value());
  EXPECT_TRUE(time->projected);
  EXPECT_EQ(time->steady_steps, 2);
  EXPECT_GT(time->seconds, part.epoch_seconds);
}

// Memory per phase: ResNet-18 (CIFAR stem, so activations dominate) for 2 steps of 16, evaluated
// at batch 256.
training::Config phase_config() {
  training::TrackingCpuAllocator::instance();  // before any tensor, so every byte is counted
  return training::parse_config(R"(
model: {arch: resnet18, stem: cifar}
data: {source: synthetic, synthetic_train_size: 32, synthetic_test_size: 256}
training: {device: cpu, epochs: 1, batch_size: 16, eval_batch_size: 256, memory_format: contiguous}
monitor: {sample_period: 0}
checkpoint: {enabled: false}
)",
                                "phases");
}

int64_t column(const std::vector<ordered_json>& rows, const char* key) {
  return rows.at(0).at(key).get<int64_t>();
}

TEST(Trainer, CheckpointingLowersTheTrainingPeakAndLeavesTheEvaluationPeak) {
  test_support::TempDir dir;
  auto config = phase_config();
  const auto plain = run(config, dir / "plain");
  config.checkpointing.mode(training::CheckpointMode::On);
  const auto checkpointed = run(config, dir / "checkpointed");
  // Evaluation at batch 256 needs more than training at 16, and is the run's overall peak.
  EXPECT_GT(column(plain, "eval_peak_allocated_bytes"),
            column(plain, "train_peak_allocated_bytes"));
  EXPECT_EQ(column(plain, "peak_allocated_bytes"), column(plain, "eval_peak_allocated_bytes"));
  // Checkpointing changes what training keeps, not what evaluation needs. At batch 16 the
  // weights, gradients and momentum (128 MiB) dominate; what recomputing every block saves is
  // measured here (a CPU's kernels keep scratch of their own), and the run saves at least half.
  const auto all =
      training::choose_blocks(training::measure_blocks(config, torch::kCPU), int64_t{1} << 50);
  const int64_t saving = all.plain_peak - all.smallest_peak;
  ASSERT_GT(saving, 0);
  EXPECT_LT(column(checkpointed, "train_peak_allocated_bytes"),
            column(plain, "train_peak_allocated_bytes") - saving / 2);
  EXPECT_NEAR(column(checkpointed, "eval_peak_allocated_bytes"),
              column(plain, "eval_peak_allocated_bytes"),
              0.01 * column(plain, "eval_peak_allocated_bytes"));
  // Reserved bytes exist on CUDA only.
  EXPECT_TRUE(plain.at(0).at("train_peak_reserved_bytes").is_null());
  EXPECT_TRUE(plain.at(0).at("eval_peak_reserved_bytes").is_null());
  EXPECT_NE(test_support::read_text(dir / "plain/train.log")
                .find("memory: evaluation sets this run's peak"),
            std::string::npos);
}

TEST(Trainer, Bf16LowersTheTrainingPeak) {
  NATIVE_BF16_OR_SKIP();
  test_support::TempDir dir;
  // Two steps of 16 images (54 GFLOP, skipped where bf16 is emulated): the activations must
  // outweigh autocast's bf16 copies of the weights (21 MiB) for bf16 to save memory at all.
  auto config = phase_config();
  config.data.dataset.synthetic_test_size(16);
  config.training.eval_batch_size = 16;
  const auto fp32 = run(config, dir / "fp32");
  config.training.precision = training::Precision::BF16;
  const auto bf16 = run(config, dir / "bf16");
  // The fp32 weights, gradients and momentum stay; the activations are halved.
  EXPECT_LT(column(bf16, "train_peak_allocated_bytes"),
            column(fp32, "train_peak_allocated_bytes") - (8 << 20));
}

// training.ema_decay: the evaluation runs the weight average, which the checkpoint keeps, so a
// run resumed mid-epoch still matches the straight one exactly.
TEST(Trainer, AWeightAverageIsEvaluatedAndResumedExactly) {
  test_support::TempDir dir;
  auto config = tiny_config();
  const auto plain = run(config, dir / "plain");
  config.training.ema_decay = 0.9;
  const auto straight = run(config, dir / "straight");
  ASSERT_EQ(straight.size(), 4u);
  for (size_t i = 0; i < straight.size(); ++i) {
    // Training is the same; what is evaluated is not.
    EXPECT_EQ(straight[i].at("train_loss"), plain[i].at("train_loss")) << i;
    EXPECT_NE(straight[i].at("test_loss"), plain[i].at("test_loss")) << i;
  }
  auto cut = config;
  cut.training.max_steps = 7;
  ASSERT_EQ(run(cut, dir / "resumed").size(), 2u);
  expect_same_metrics(straight, run(config, dir / "resumed", dir / "resumed/checkpoint.pt", true));
}

// A checkpoint written without training.ema_decay holds no average: resuming it with one starts
// the average from the checkpoint's weights (not from the freshly built model's).
TEST(Trainer, AWeightAverageStartsFromTheWeightsOfACheckpointWithoutOne) {
  test_support::TempDir dir;
  auto config = tiny_config();
  config.training.max_steps = 7;
  run(config, dir / "plain");
  auto evaluate_resumed = [&](const training::Config& c) {
    training::Trainer trainer(c, torch::kCPU, split_for(c, data::SplitName::Train),
                              split_for(c, data::SplitName::Test));
    trainer.resume(dir / "plain/checkpoint.pt");
    return trainer.evaluate();
  };
  auto with_average = config;
  with_average.training.ema_decay = 0.9;
  const auto model = evaluate_resumed(config), average = evaluate_resumed(with_average);
  EXPECT_EQ(model.loss, average.loss);
  EXPECT_EQ(model.accuracy, average.accuracy);
}

// training.eval_flip averages each test image's logits with its mirror image's: on images that are
// their own mirror image it changes nothing; on others it changes the evaluation.
TEST(Trainer, EvaluationWithFlipsAveragesTheMirrorImage) {
  auto config = tiny_config();
  auto test_split = split_for(config, data::SplitName::Test);
  auto evaluate = [&](const data::Split& test, bool flip) {
    config.training.eval_flip = flip;
    training::Trainer trainer(config, torch::kCPU, split_for(config, data::SplitName::Train), test);
    return trainer.evaluate();
  };
  const auto plain = evaluate(test_split, false), flipped = evaluate(test_split, true);
  EXPECT_GT(std::abs(plain.loss - flipped.loss), 1e-6);

  data::Split mirrored = test_split;
  const auto left = test_split.images.slice(3, 0, 16);
  mirrored.images = torch::cat({left, left.flip({3})}, 3).contiguous();
  const auto a = evaluate(mirrored, false), b = evaluate(mirrored, true);
  EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::abs(a.loss));
  EXPECT_EQ(a.accuracy, b.accuracy);
}

}  // namespace
