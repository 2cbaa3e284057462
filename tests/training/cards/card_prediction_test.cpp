// Predicting a card's memory from the CPU: the card table, the stream's scaling, the replay, a
// real recording, and `train memory --card`.
#include "training/cards/card_prediction.h"

#include <ATen/Context.h>
#include <ATen/cpu/Utils.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "data/loader.h"
#include "test_support.h"
#include "training/cards/linear_stream.h"
#include "training/cards/step_recording.h"
#include "training/cards/stream_replay.h"
#include "training/config/config.h"
#include "training/parts/components.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"
#include "training/studies/memory_report.h"

namespace training {
namespace {

namespace fs = std::filesystem;

TEST(CardPrediction, ScalesEachAllocationLinearlyInTheBatch) {
  // An allocation of 100 + 10 x batch bytes, one of 7 bytes whatever the batch, and a free.
  const auto at2 = stream({{0, 120}, {1, 7}, {0, 0}});
  const auto at4 = stream({{0, 140}, {1, 7}, {0, 0}});
  const LinearStream linear = linear_stream(at2, 2, at4, 4);
  const auto at100 = linear.at(100);
  EXPECT_EQ(at100.events[0].bytes, 1100);
  EXPECT_EQ(at100.events[1].bytes, 7);
  EXPECT_TRUE(at100.events[2].is_free());
  EXPECT_EQ(mismatched_allocations(linear, stream({{0, 130}, {1, 7}, {0, 0}}), 3), 0);
  EXPECT_EQ(mismatched_allocations(linear, stream({{0, 131}, {1, 7}, {0, 0}}), 3), 1);
  EXPECT_EQ(mismatched_allocations(linear, stream({{0, 130}, {0, 0}, {1, 7}}), 3), -1);
  // Streams that allocate in another order cannot be scaled.
  EXPECT_THROW(linear_stream(at2, 2, stream({{0, 140}, {0, 0}, {1, 7}}), 4), std::runtime_error);
  EXPECT_THROW(linear_stream(at2, 2, stream({{0, 140}, {1, 7}}), 4), std::runtime_error);
}

// The largest batch is the edge on any card the table takes, up to 1 PiB: the search is bounded by
// the first batch at which one allocation alone outgrows the allocator (it stopped at 2^24 and
// gave that as the answer), with expandable segments too (their span was 64 TiB), and by the
// largest batch a config takes (round 5: 2,328,970,624 was reported on a 1024TiB card).
TEST(CardPrediction, TheLargestBatchIsTheEdgeOnTheLargestCard) {
  const LinearStream linear =
      linear_stream(stream({{0, 1200}, {0, 0}}), 2, stream({{0, 1400}, {0, 0}}), 4);
  EXPECT_EQ(linear.first_batch_over(1100), 2);  // 1000 + 100 x batch bytes > 1100 from batch 2
  EXPECT_EQ(linear.first_batch_over(1200), 3);
  EXPECT_EQ(linear.first_batch_over(1150), 2);  // rounded down, not toward zero: 1200 > 1150
  EXPECT_EQ(linear.first_batch_over(1250), 3);
  EXPECT_EQ(linear.first_batch_over(0), 1);
  EXPECT_FALSE(linear_stream(stream({{0, 7}}), 2, stream({{0, 7}}), 4).first_batch_over(100));
  const int64_t card = find_card("1024TiB").memory_bytes;
  for (const bool expandable : {false, true}) {
    AllocatorOptions options;
    options.expandable_segments = expandable;
    options.device_memory = card;
    options.limit = card;
    EXPECT_EQ(largest_fitting_batch(linear, HeldData{}, options, {}, 1), kMaxBatchSize)
        << expandable;
    // Below the cap the replay decides: the edge of 1000 + 100 x batch under 50,001,000 bytes.
    options.limit = 1000 + 100 * 500000;
    const int64_t largest = largest_fitting_batch(linear, HeldData{}, options, {}, 1);
    auto fits = [&](int64_t batch) { return replay_stream(linear.at(batch), options, {}).fits; };
    EXPECT_GT(largest, 1000) << expandable;
    EXPECT_TRUE(fits(largest)) << expandable;
    EXPECT_FALSE(fits(largest + 1)) << expandable;
  }
}

// A batch that does not train is never the largest that fits: where a BatchNorm would see one value
// per channel at batch 1 (models::smallest_trainable_batch 2), a card that holds batch 1 and not 2
// holds no batch, and the search starts at 2.
TEST(CardPrediction, TheLargestBatchIsNeverOneThatDoesNotTrain) {
  constexpr int64_t MiB = int64_t{1} << 20;
  // 20 MiB x batch: batch 1 takes a 20 MiB segment, batch 2 a 40 MiB one.
  const LinearStream linear =
      linear_stream(stream({{0, 40 * MiB}, {0, 0}}), 2, stream({{0, 80 * MiB}, {0, 0}}), 4);
  AllocatorOptions options;
  options.device_memory = 1024 * MiB;
  options.limit = 30 * MiB;
  EXPECT_EQ(largest_fitting_batch(linear, HeldData{}, options, {}, 1), 1);
  EXPECT_EQ(largest_fitting_batch(linear, HeldData{}, options, {}, 2), 0);
  options.limit = 130 * MiB;
  const int64_t from_one = largest_fitting_batch(linear, HeldData{}, options, {}, 1);
  EXPECT_GE(from_one, 2);
  EXPECT_EQ(largest_fitting_batch(linear, HeldData{}, options, {}, 2), from_one);
}

// Fitting is not monotone in the batch: one allocation of 64 KiB x batch takes a 2 MiB segment up
// to 1 MiB (batch 16), a 20 MiB one below 10 MiB (17 to 159), and its size rounded up to 2 MiB from
// 10 MiB (160 on). Under 15 MiB batches 1-16 and 160-224 fit. The search from below stops at 16;
// a batch shown fitting above it (a plan's candidate, a sweep's trial) is never above the largest
// batch: the search goes on from the largest of them, whatever their order, even where the
// smallest batch does not fit.
TEST(CardPrediction, TheLargestBatchIsAtOrAboveEveryBatchShownThatFits) {
  constexpr int64_t KiB = 1024, MiB = 1024 * KiB;
  const LinearStream linear =
      linear_stream(stream({{0, 128 * KiB}, {0, 0}}), 2, stream({{0, 256 * KiB}, {0, 0}}), 4);
  AllocatorOptions options;
  options.device_memory = 1024 * MiB;
  options.limit = 15 * MiB;
  auto fits = [&](int64_t batch) { return replay_stream(linear.at(batch), options, {}).fits; };
  ASSERT_TRUE(fits(16) && !fits(17) && !fits(159) && fits(160) && fits(224) && !fits(225));
  auto largest = [&](int64_t smallest, const std::vector<int64_t>& shown) {
    return largest_fitting_batch(linear, HeldData{}, options, {}, smallest, shown);
  };
  EXPECT_EQ(largest(1, {}), 16);
  EXPECT_EQ(largest(1, {8, 100}), 16);  // none above 16 fits
  EXPECT_EQ(largest(1, {200}), 224);
  EXPECT_EQ(largest(1, {100, 170, 200, 17}), 224);
  EXPECT_EQ(largest(1, {200, 17, 170, 100}), 224);
  EXPECT_EQ(largest(1, {300}), 16);  // beyond the batch at which the allocation alone is over
  EXPECT_EQ(largest(17, {}), 0);
  EXPECT_EQ(largest(17, {170}), 224);
  EXPECT_EQ(largest(17, {10, 170}), 224);  // a batch below the smallest that trains is not one
}

// What a step needs is searched above the limit it did not fit under: fitting is not monotone in
// the limit (round 5: a step that did not fit an A10 "needed" 22238 MiB of its 22257 MiB, a
// figure below the card, with a positive margin).
TEST(CardPrediction, WhatAStepNeedsIsAboveTheLimitItDidNotFitUnder) {
  constexpr int64_t MiB = int64_t{1} << 20;
  const LinearStream linear =
      linear_stream(stream({{0, 40 * MiB}, {0, 0}}), 2, stream({{0, 80 * MiB}, {0, 0}}), 4);
  const AllocationStream at_one = linear.at(1);  // one allocation of 20 MiB
  AllocatorOptions options;
  options.device_memory = 1024 * MiB;
  Replay replay;
  const int64_t least = smallest_fitting_limit(at_one, options, {}, &replay);
  EXPECT_EQ(least, 20 * MiB);
  EXPECT_TRUE(replay.fits);
  EXPECT_EQ(smallest_fitting_limit(at_one, options, {}, &replay, least - 1), least);
  EXPECT_EQ(smallest_fitting_limit(at_one, options, {}, &replay, least), least + MiB);
  EXPECT_EQ(smallest_fitting_limit(at_one, options, {}, &replay, least + 5 * MiB + 3),
            least + 6 * MiB);
  EXPECT_TRUE(replay.fits);
}

TEST(CardPrediction, ReplaysPhasesWithTheCardsWorkspaces) {
  constexpr int64_t MiB = int64_t{1} << 20;
  // held: 4 MiB; forward: +30 MiB; backward: frees it, 12 MiB of gradients.
  const auto s =
      stream({{0, 4 * MiB}, {1, 30 * MiB}, {1, 0}, {2, 12 * MiB}},
             {{1, "held"}, {1, "step1 forward"}, {2, "step1 backward"}, {4, "step1 end"}});
  BesideTensors beside;
  beside.cublas_workspace = 32 * MiB;
  beside.workspaces = 2;
  const Replay replay = replay_stream(s, {}, beside);
  ASSERT_TRUE(replay.fits);
  // The workspaces are events at the backward's start, before its first free: the peak is while
  // the forward's 30 MiB are still held (the replay counted it only from the next event on).
  EXPECT_EQ(replay.peak_allocated, 4 * MiB + 30 * MiB + 64 * MiB);
  EXPECT_EQ(replay.peak_phase, "step1 backward");
  ASSERT_EQ(replay.phases.size(), 3u);
  EXPECT_EQ(replay.phases[0].phase, "step1 forward");
  EXPECT_EQ(replay.phases[0].allocated, 34 * MiB);
  // 20 MiB for the 4 MiB block, 30, 32 and 32, and the 12 MiB request reuses the freed 30 MiB.
  EXPECT_EQ(replay.peak_reserved, 20 * MiB + 30 * MiB + 64 * MiB);
  AllocatorOptions limited;
  limited.limit = 100 * MiB;
  const Replay tight = replay_stream(s, limited, beside);
  EXPECT_FALSE(tight.fits);
  EXPECT_EQ(tight.failed_at, "step1 backward");
  // Round 5: out of memory before the first mark was "out of memory in start", a phase named
  // nowhere else: it has the snapshot's name for what is held before the first step.
  limited.limit = 2 * MiB;
  const Replay held = replay_stream(s, limited, beside);
  EXPECT_FALSE(held.fits);
  EXPECT_EQ(held.failed_at, "held before the first step (weights, batches)");
  // data.device_resident's tensors are held from before the first step, in a phase of their own
  // that names them where they do not fit (they read "(weights, batches)"); the step's phases
  // are the same.
  HeldData data;
  data.resident = {40 * MiB, MiB};
  const AllocationStream with_data = with_held_data(s, 1, data);
  EXPECT_EQ(with_data.events.size(), s.events.size() + 2);
  limited.limit = 200 * MiB;
  const Replay roomy = replay_stream(with_data, limited, beside);
  ASSERT_TRUE(roomy.fits);
  EXPECT_EQ(roomy.peak_allocated, replay.peak_allocated + 41 * MiB);
  ASSERT_EQ(roomy.phases.size(), replay.phases.size());
  for (size_t i = 0; i < roomy.phases.size(); ++i)
    EXPECT_EQ(roomy.phases[i].phase, replay.phases[i].phase);
  limited.limit = 30 * MiB;
  EXPECT_EQ(replay_stream(with_data, limited, beside).failed_at,
            "held before the first step (data.device_resident's splits)");
}

// The section says what limit the replay ran under: the card less what lies outside the
// allocator, or memory.limit where that is smaller (it was explained as the card less ...).
TEST(CardPrediction, TheSectionSaysWhetherTheCardOrMemoryLimitCapsTheAllocator) {
  constexpr int64_t MiB = int64_t{1} << 20;
  training::CardPrediction p;
  p.card = {"T4", 15360 * MiB, "the driver", 7, "sm_75", {}};
  p.beside.outside_allocator = 512 * MiB;
  p.beside.outside_source = "a measured figure";
  p.allocator.limit = 14848 * MiB;
  p.replay.fits = true;
  std::string md = training::prediction_markdown({{"fp32", p}});
  EXPECT_NE(md.find("under 14.50 GiB (the card less 512.00 MiB outside the allocator: a measured "
                    "figure)"),
            std::string::npos)
      << md;
  p.allocator.limit = 2048 * MiB;
  p.limited_by_memory_limit = true;
  md = training::prediction_markdown({{"fp32", p}});
  EXPECT_NE(md.find("under 2.00 GiB, memory.limit, which is below 14.50 GiB (the card less 512.00 "
                    "MiB outside the allocator"),
            std::string::npos)
      << md;
  // The margin is what is left under that limit, not on the whole card.
  p.replay.peak_reserved = 1536 * MiB;
  EXPECT_EQ(p.margin(), 512 * MiB);
  // Sixteenth pass: a step that does not fit under memory.limit was said to need "993MiB on the
  // device" (a card of that size with the same --memory-limit still did not fit): what it needs is
  // the limit, as --memory-limit takes it.
  p.replay.fits = false;
  p.replay.failed_at = "step2 backward";
  p.needed_limit = 222 * MiB + 1;
  p.needed.peak_reserved = p.needed_limit;
  const std::string line = training::prediction_line("fp32", p);
  EXPECT_NE(line.find("it needs a memory.limit of at least 223MiB (--memory-limit 223MiB; "),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("on the device"), std::string::npos) << line;
  // Above what the card holds, the limit alone would not do, nor a larger card under the same
  // limit (hostile pass: "it needs 993MiB on the device" beside --memory-limit 215MiB): both.
  p.needed_limit = 15 * 1024 * MiB;
  const std::string above = training::prediction_line("fp32", p);
  EXPECT_NE(above.find("it needs a memory.limit of at least 15GiB on a card of at least 15872MiB "
                       "(--memory-limit 15GiB --card 15872MiB; "),
            std::string::npos)
      << above;
}

Config small_config() {
  Config config;
  config.model = models::ResNetOptions(18).stem(models::Stem::Cifar);
  config.training.device = "cpu";
  config.training.batch_size = 64;
  config.training.memory_format = c10::MemoryFormat::Contiguous;
  return config;
}

// The bytes a stream holds at its peak, exactly and with each block rounded up to 512 bytes as the
// allocator rounds it.
std::pair<int64_t, int64_t> stream_peaks(const AllocationStream& stream) {
  std::map<int64_t, int64_t> live;
  int64_t held = 0, held_rounded = 0, peak = 0, peak_rounded = 0;
  for (const auto& event : stream.events) {
    if (event.is_free()) {
      held -= live.at(event.id);
      held_rounded -= (live.at(event.id) + 511) / 512 * 512;
      live.erase(event.id);
      continue;
    }
    live[event.id] = event.bytes;
    held += event.bytes;
    held_rounded += (event.bytes + 511) / 512 * 512;
    peak = std::max(peak, held);
    peak_rounded = std::max(peak_rounded, held_rounded);
  }
  return {peak, peak_rounded};
}

// An accumulating step (2 micro-batches) is recorded micro-batch by micro-batch. The stream holds
// what the CPU held less the kernels' own scratch; its replay's allocated peak is the stream's, up
// to the model's rounding of each block to 512 bytes; it is above the plain step's by less than the
// gradients (some of them are held at the plain step's peak too), and the card's workspaces are
// placed once, at the first backward.
TEST(CardPrediction, AnAccumulatingStepReplaysToWhatItsStreamHolds) {
  const Config config = small_config();
  const Setting plain{Precision::FP32, CheckpointMode::Off, c10::MemoryFormat::Contiguous};
  Setting accumulating = plain;
  accumulating.accumulate_steps = 2;
  const torch::Device cpu(torch::kCPU);
  training::reset_peak_memory(cpu);
  const AllocationStream stream = record_step_stream(config, accumulating, 16);
  const int64_t measured = training::memory_stats(cpu).peak_allocated;
  const Replay replay = replay_stream(stream, {}, {});
  const auto [peak, peak_rounded] = stream_peaks(stream);
  EXPECT_LE(peak, measured) << "the stream holds more than the CPU held";
  EXPECT_GT(peak, measured * 0.8) << "the stream left out more than a kernel's scratch";
  // A block is whole or split (the large pool keeps a remainder only above 1 MiB): allocated
  // counts the block, at least the rounded request.
  EXPECT_GE(replay.peak_allocated, peak_rounded);
  EXPECT_NE(replay.peak_phase.find(" micro2 "), std::string::npos) << replay.peak_phase;
  const AllocationStream plain_stream = record_step_stream(config, plain, 16);
  const Replay one = replay_stream(plain_stream, {}, {});
  int64_t gradients = 0;
  for (const auto& p : training::build_step_parts(config, cpu).model->parameters()) {
    gradients += p.numel() * 4;
  }
  EXPECT_GT(replay.peak_allocated, one.peak_allocated);
  EXPECT_LT(replay.peak_allocated - one.peak_allocated, gradients);
  // What accumulation adds, as the streams hold it (ResNet-18 CIFAR stem, batch 16: 21.6 MB of
  // its 44.7 MB of gradients).
  const int64_t added_by_stream = peak - stream_peaks(plain_stream).first;
  EXPECT_NEAR(static_cast<double>(replay.peak_allocated - one.peak_allocated),
              static_cast<double>(added_by_stream), static_cast<double>(added_by_stream) / 10);
  BesideTensors beside;
  beside.cublas_workspace = int64_t{1} << 20;
  beside.workspaces = 1;
  // Scaled from batches 2 and 4 like a plain step, exactly (checked on batch 3), and 4 micro-
  // batches predicted as 2 (the third and fourth hold what the second holds).
  accumulating.accumulate_steps = 4;
  const CardPrediction p = predict_on_card(config, accumulating, find_card("1GiB"), {});
  EXPECT_EQ(p.mismatched, 0);
  EXPECT_NE(p.figures().peak_phase.find(" micro2 "), std::string::npos) << p.figures().peak_phase;
  const int64_t added = replay_stream(stream, {}, beside).peak_allocated - replay.peak_allocated;
  EXPECT_GT(added, int64_t{1} << 19);
  EXPECT_LE(added, int64_t{1} << 20) << "the workspace placed more than once";
}

// A measured fp16 step is one the optimizer takes: the GradScaler's 2^16 overflowed every recorded
// step's gradients on the CPU, each step was skipped, and the stream never held the optimizer's
// momentum (fp16 on an H200, ResNet-18 batch 16: 153.2 MiB predicted against bf16's 197.0).
// After the recorded steps the fp16 stream holds what the fp32 one holds: weights and momentum.
TEST(CardPrediction, AnFp16StreamHoldsTheMomentumOfAStepTheOptimizerTook) {
  Config config = small_config();
  config.model.stem(models::Stem::ImageNet);  // as `train memory --card` recorded it
  auto live_at_end = [](const AllocationStream& s) {
    std::map<int64_t, int64_t> live;
    for (const auto& event : s.events) {
      if (event.is_free()) {
        live.erase(event.id);
      } else {
        live[event.id] = event.bytes;
      }
    }
    int64_t bytes = 0;
    for (const auto& [id, size] : live) bytes += size;
    return bytes;
  };
  const auto layout = c10::MemoryFormat::Contiguous;
  const int64_t fp32 =
      live_at_end(record_step_stream(config, {Precision::FP32, CheckpointMode::Off, layout}, 4));
  const int64_t fp16 =
      live_at_end(record_step_stream(config, {Precision::FP16, CheckpointMode::Off, layout}, 4));
  int64_t parameters = 0;
  for (const auto& p : build_step_parts(config, torch::kCPU).model->parameters()) {
    parameters += p.numel() * static_cast<int64_t>(p.element_size());
  }
  EXPECT_GE(fp32, 2 * parameters);  // weights and momentum
  EXPECT_LT(std::abs(fp16 - fp32), parameters / 2) << "fp16 " << fp16 << ", fp32 " << fp32;
}

// fp16 recorded through bf16's kernels (under fp16's GradScaler) is fp16's own stream, event for
// event: the same casts and 2-byte tensors, the CPU's fp16 kernels' internals left out as every
// operation's are; it takes a fraction of the time where the CPU has native bf16.
TEST(CardPrediction, Fp16ThroughBf16KernelsIsFp16sOwnStream) {
  Config config = small_config();
  config.model.stem(models::Stem::ImageNet);
  const Setting fp16{Precision::FP16, CheckpointMode::Off, c10::MemoryFormat::Contiguous};
  const AllocationStream own = record_step_stream(config, fp16, 2, 2, /*fp16_through_bf16=*/false);
  const AllocationStream through = record_step_stream(config, fp16, 2, 2, true);
  ASSERT_EQ(through.events.size(), own.events.size());
  for (size_t i = 0; i < own.events.size(); ++i) {
    ASSERT_EQ(through.events[i].bytes, own.events[i].bytes) << "event " << i;
    ASSERT_EQ(through.events[i].id, own.events[i].id) << "event " << i;
  }
  ASSERT_EQ(through.marks.size(), own.marks.size());
  for (size_t i = 0; i < own.marks.size(); ++i) {
    EXPECT_EQ(through.marks[i].event, own.marks[i].event) << own.marks[i].label;
  }
}

// A data-parallel sweep's trials hold c10d's Reducer's gradient buckets (one flat buffer a bucket,
// made with the Reducer, held for the run): the card prediction holds them too (it left them out:
// 44.7 MB for ResNet-18).
TEST(CardPrediction, ADataParallelSweepsStreamHoldsTheReducersBuckets) {
  Config config = small_config();
  const Setting cell{Precision::FP32, CheckpointMode::Off, c10::MemoryFormat::Contiguous};
  auto held = [](const AllocationStream& s) {
    int64_t bytes = 0;
    size_t end = 0;
    for (const auto& mark : s.marks) {
      if (mark.label == "held") end = mark.event;
    }
    for (size_t i = 0; i < end; ++i) bytes += s.events[i].bytes;
    return bytes;
  };
  const int64_t alone = held(record_step_stream(config, cell, 2, 1));
  config.sweep.data_parallel = true;
  config.distributed.bucket_mb = 5;
  const AllocationStream reduced = record_step_stream(config, cell, 2, 1);
  int64_t parameters = 0;
  for (const auto& p : build_step_parts(config, torch::kCPU).model->parameters()) {
    parameters += p.numel() * static_cast<int64_t>(p.element_size());
  }
  EXPECT_EQ(held(reduced) - alone, parameters);
  CardPredictor predictor(config, find_card("T4"), {});
  const CardPrediction p = predictor.predict(cell, 8);
  EXPECT_EQ(p.reducer_bucket_bytes, parameters);
  EXPECT_EQ(prediction_columns(p).at("reducer_bucket_bytes"), parameters);
}

// A stop during the recordings of a setting's step (three, at batches 2, 4 and 3: 6.7 s for
// ResNet-50) waited for all of them (train sweep --card). The predictor takes a graceful stop
// before each recording: RecordingStopped, nothing of the setting kept; once the stop is cleared
// the setting is recorded whole.
TEST(CardPrediction, AStopBetweenTheRecordingsIsTakenBeforeTheNextOne) {
  const Config config = small_config();
  const Setting cell{Precision::FP32, CheckpointMode::Off, c10::MemoryFormat::Contiguous};
  CardPredictor predictor(config, find_card("T4"), {});
  clear_stop_request();  // a stop ignored by an earlier test in this process (too late) is not
  ::setenv("TRAIN_TEST_STOP_AT", "card recording batch 4", 1);
  EXPECT_THROW(predictor.predict(cell, 8), RecordingStopped);
  ::unsetenv("TRAIN_TEST_STOP_AT");
  clear_stop_request();
  const CardPrediction p = predictor.predict(cell, 8);
  EXPECT_EQ(p.mismatched, 0);
  EXPECT_TRUE(p.replay.fits);
}

TEST(CardPrediction, ARealStepScalesExactlyAndItsLargestBatchIsTheEdge) {
  const Config config = small_config();
  const Setting cell{Precision::FP32, CheckpointMode::Off, c10::MemoryFormat::Contiguous};
  const CardPrediction p = predict_on_card(config, cell, find_card("1GiB"), {});
  EXPECT_EQ(p.mismatched, 0) << "an allocation of ResNet-18 is not linear in the batch";
  EXPECT_EQ(p.allocator.limit, (int64_t{1} << 30) - p.beside.outside_allocator);
  ASSERT_GT(p.largest_batch, 1);
  // The largest batch fits by replay and the next does not.
  const LinearStream linear =
      linear_stream(record_step_stream(config, cell, 2), 2, record_step_stream(config, cell, 4), 4);
  auto replay = [&](int64_t batch) {
    return replay_stream(with_held_data(linear.at(batch), batch, p.held), p.allocator, p.beside);
  };
  auto fits = [&](int64_t batch) { return replay(batch).fits; };
  EXPECT_EQ(p.held.prefetched_batches, 2);  // data.prefetch auto, as on CUDA
  EXPECT_TRUE(p.held.resident.empty());
  EXPECT_TRUE(fits(p.largest_batch));
  EXPECT_FALSE(fits(p.largest_batch + 1));
  EXPECT_EQ(p.replay.fits, p.batch_size <= p.largest_batch);
  EXPECT_GE(p.replay.peak_reserved, p.replay.peak_allocated);
  // Steps 2 and 3 hold the momentum buffers that step 1 makes: their peaks are the higher.
  // One batch more does not fit: its figures are what it needs, beyond the card.
  const CardPrediction over =
      CardPredictor(config, find_card("1GiB"), {}).predict(cell, p.largest_batch + 1);
  ASSERT_FALSE(over.replay.fits);
  EXPECT_LT(over.margin(), 0);
  EXPECT_GT(over.needed.peak_allocated, over.replay.peak_allocated);
  // What it needs is the smallest card it fits (round 5: a replay without a limit, which frees
  // nothing cached, "needed" tens of GiB more near a card's edge): 1 MiB less does not fit.
  ASSERT_TRUE(over.needed.fits);
  EXPECT_GT(over.needed_limit, over.allocator.limit);
  EXPECT_LE(over.needed.peak_reserved, over.needed_limit);
  const auto over_stream =
      with_held_data(linear.at(p.largest_batch + 1), p.largest_batch + 1, p.held);
  AllocatorOptions below = over.allocator;
  below.limit = over.needed_limit - kMiB;
  EXPECT_FALSE(replay_stream(over_stream, below, over.beside).fits);
  below.limit = over.needed_limit;
  EXPECT_TRUE(replay_stream(over_stream, below, over.beside).fits);
  EXPECT_EQ(prediction_columns(over).at("predicted_device_bytes").get<int64_t>(),
            over.needed.peak_reserved + over.beside.outside_allocator);
  EXPECT_EQ(over.needed_by_size, 0);  // a card given by its size: its own figure is the one
  // Round 5: the size advised after a named card is one `--card SIZE` fits. A T4's cuBLAS
  // workspaces (8.125 MiB) are not a size card's (32 MiB): its own figure ("needs 30435MiB") did
  // not fit as --card 30435MiB, which then asked for 44 MiB more.
  const int64_t beyond_t4 = 5000;
  const CardPrediction t4 = CardPredictor(config, find_card("T4"), {}).predict(cell, beyond_t4);
  ASSERT_FALSE(t4.replay.fits);
  ASSERT_GT(t4.needed_by_size, t4.needed_limit + t4.beside.outside_allocator);
  auto fits_as_size = [&](int64_t bytes) {
    AllocatorOptions options;
    options.limit = bytes - kOutsideAllocatorBytes;
    options.device_memory = bytes;
    return replay_stream(with_held_data(linear.at(beyond_t4), beyond_t4, t4.held), options,
                         beside_tensors(find_card(byte_size_text(bytes))))
        .fits;
  };
  EXPECT_TRUE(fits_as_size(t4.needed_by_size));
  EXPECT_FALSE(fits_as_size(t4.needed_by_size - kMiB));
  EXPECT_NE(prediction_line("fp32", t4).find("--card " + size_at_least_text(t4.needed_by_size)),
            std::string::npos)
      << prediction_line("fp32", t4);
  EXPECT_EQ(prediction_json(t4).at("needed_card_by_size_bytes"), t4.needed_by_size);
  CardPrediction in_steps = t4;  // the thirteenth review: a step's images are x its micro-batches
  in_steps.train_images = in_steps.largest_batch * 2 - 1;
  EXPECT_EQ(in_steps.largest_batch_text(), std::to_string(in_steps.largest_batch));
  in_steps.accumulate_steps = 2;
  EXPECT_EQ(in_steps.largest_batch_text(),
            fmt::format("{} ({} images a step: more than the {} training images of the config, "
                        "which train refuses)",
                        in_steps.largest_batch, 2 * in_steps.largest_batch, in_steps.train_images));
  CardPrediction beyond_any = t4;  // a size --card refuses (above 1024TiB) is never advised
  beyond_any.needed_by_size = kLargestCard + kMiB;
  EXPECT_EQ(prediction_line("fp32", beyond_any).find("--card "), std::string::npos)
      << prediction_line("fp32", beyond_any);
  // A setting the card cannot run (bf16 on sm_75) is predicted, but every table says it cannot
  // run, as `train plan` does (round 5: sweep.md read "fits: yes" for bf16 on a T4).
  EXPECT_TRUE(t4.unsupported.empty());
  EXPECT_TRUE(prediction_json(t4).at("unsupported").is_null());
  CardPrediction bf16 = p;
  bf16.unsupported = find_card("T4").unsupported(Precision::BF16);
  EXPECT_EQ(bf16.fits_text(),
            "cannot run: bf16 needs compute capability 8.0 or later; T4 is sm_75");
  EXPECT_NE(prediction_markdown({{"bf16", bf16}}).find("| cannot run: bf16 needs"),
            std::string::npos);
  EXPECT_EQ(prediction_columns(bf16).at("unsupported_on_card"), bf16.unsupported);
  // Twelfth pass: it was "fits": true (fits_on_card too) with a largest batch, and its line said
  // "fits with ... to spare", where `train plan` says it does not fit.
  bf16.replay.fits = true;  // its memory would fit
  EXPECT_FALSE(bf16.fits());
  EXPECT_EQ(prediction_json(bf16).at("fits"), false);
  EXPECT_TRUE(prediction_json(bf16).at("largest_batch").is_null());
  EXPECT_EQ(prediction_columns(bf16).at("fits_on_card"), false);
  EXPECT_TRUE(prediction_columns(bf16).at("largest_batch_on_card").is_null());
  EXPECT_NE(prediction_line("bf16", bf16).find(": cannot run: bf16 needs compute capability"),
            std::string::npos)
      << prediction_line("bf16", bf16);
  EXPECT_EQ(prediction_line("bf16", bf16).find("fits with"), std::string::npos);
  // Thirteenth pass: the speed's reason, the same, was said again after it.
  bf16.speed.reset();
  bf16.no_speed = bf16.unsupported;
  const std::string line = prediction_line("bf16", bf16);
  EXPECT_EQ(line.find(bf16.unsupported), line.rfind(bf16.unsupported)) << line;
  EXPECT_EQ(prediction_columns(over).at("allocator_options"), "");
  EXPECT_TRUE(prediction_columns(over).at("device_resident_bytes").is_null());
  CardPrediction split = over;  // the options it replayed under, in a sweep's and a plan's columns
  split.allocator.max_split_size = 100 * kMiB;
  EXPECT_EQ(prediction_columns(split).at("allocator_options"), "max_split_size_mb:100");
  // Twelfth pass: what is missing was rounded up to a whole MiB ("1MiB more" where 105 bytes
  // were): the limit is searched in whole MiB, so it is at most the difference, said as such.
  EXPECT_NE(prediction_line("fp32", over)
                .find("up to " + training::format_bytes(over.needed_limit - over.allocator.limit) +
                      " more than the card has"),
            std::string::npos)
      << prediction_line("fp32", over);
  const Replay edge = replay(p.largest_batch);
  ASSERT_EQ(edge.phases.size(), 12u);  // 3 steps x forward, backward, optimizer, end
  EXPECT_NE(edge.peak_phase.rfind("step1", 0), 0u) << edge.peak_phase;
  // A largest batch above the training set the config says it has fits, but train refuses it:
  // every output that shows it says so (round 5: a figure a user could not type back).
  EXPECT_EQ(p.train_images, 0);  // CIFAR-10's files: not known without reading them
  EXPECT_EQ(p.largest_batch_text(), std::to_string(p.largest_batch));
  Config few = config;
  few.data.dataset.source(data::Source::Synthetic).synthetic_train_size(p.largest_batch - 1);
  const CardPrediction capped = predict_on_card(few, cell, find_card("1GiB"), {});
  EXPECT_EQ(capped.largest_batch, p.largest_batch);  // the memory's figure stands
  EXPECT_EQ(capped.train_images, p.largest_batch - 1);
  const std::string said = std::to_string(p.largest_batch) + " (more than the " +
                           std::to_string(p.largest_batch - 1) +
                           " training images of the config, which train refuses)";
  EXPECT_NE(prediction_line("fp32", capped).find("the largest batch that fits is " + said),
            std::string::npos)
      << prediction_line("fp32", capped);
  EXPECT_NE(prediction_markdown({{"fp32", capped}}).find("| " + said + " |"), std::string::npos);
}

// Fitting is not monotone in the batch (the allocator's rounding and its reuse of segments): on a
// card of 1448 MiB, ResNet-18 (CIFAR stem) fp32 fits batch 99, not 100, and 102 again. A prediction
// at 102 said "fits" and "the largest batch that fits is 99", the search's edge from below. The
// largest batch is never below a batch the prediction says fits, and every prediction of the
// setting by one predictor (a sweep's trials, a plan's candidates) says the same figure.
TEST(CardPrediction, TheLargestBatchIsNeverBelowABatchItSaysFits) {
  const Config config = small_config();
  const Setting cell{Precision::FP32, CheckpointMode::Off, c10::MemoryFormat::Contiguous};
  const Card card = find_card("1448MiB");
  CardPredictor predictor(config, card, {});
  const CardPrediction alone = CardPredictor(config, card, {}).predict(cell, 32);
  const LinearStream linear =
      linear_stream(record_step_stream(config, cell, 2), 2, record_step_stream(config, cell, 4), 4);
  auto fits = [&](int64_t batch) {
    return replay_stream(with_held_data(linear.at(batch), batch, alone.held), alone.allocator,
                         alone.beside)
        .fits;
  };
  ASSERT_TRUE(fits(99) && !fits(100) && fits(102)) << "the case is elsewhere now: find another";
  EXPECT_EQ(alone.largest_batch, 99);  // from 32 alone, the search's edge
  const CardPrediction at_102 = predictor.predict(cell, 102);
  ASSERT_TRUE(at_102.replay.fits);
  EXPECT_GE(at_102.largest_batch, 102);
  EXPECT_TRUE(fits(at_102.largest_batch));
  EXPECT_FALSE(fits(at_102.largest_batch + 1));
  EXPECT_NE(prediction_line("fp32", at_102)
                .find("the largest batch that fits is " + std::to_string(at_102.largest_batch)),
            std::string::npos);
  EXPECT_EQ(predictor.predict(cell, 32).largest_batch, at_102.largest_batch);
  // Below it, a batch that does not fit says why beside that figure, in the tables and the line.
  const CardPrediction at_100 = predictor.predict(cell, 100);
  ASSERT_FALSE(at_100.replay.fits);
  EXPECT_EQ(at_100.largest_batch, at_102.largest_batch);
  const std::string largest = std::to_string(at_102.largest_batch);
  EXPECT_NE(at_100.fits_text().find("; below the largest batch that fits, " + largest +
                                    ": fitting is not monotone in the batch)"),
            std::string::npos)
      << at_100.fits_text();
  EXPECT_NE(prediction_line("fp32", at_100)
                .find("the largest batch that fits is " + largest +
                      " (above this batch: fitting is not monotone in the batch)"),
            std::string::npos)
      << prediction_line("fp32", at_100);
}

// Round 5, a sixth pass: "1.08 GiB on the device" beside a 1.08 GiB card with 1.00 MiB to spare.
// The line's comparison, the card against what the step takes on it, is written with the
// decimals that tell the two apart (format_bytes_apart).
TEST(CardPrediction, TheCardAndWhatTheStepTakesOnItAreWrittenApart) {
  CardPrediction p;
  p.card = Card{"Small", int64_t{1106} << 20, "a test's", 0, "", {}};
  p.beside.outside_allocator = int64_t{300} << 20;
  p.replay.peak_reserved = (int64_t{1105} << 20) - p.beside.outside_allocator;
  p.replay.peak_allocated = p.replay.peak_reserved;
  p.replay.peak_phase = "step2 backward";
  p.batch_size = p.largest_batch = 32;
  const std::string line = prediction_line("fp32", p);
  EXPECT_NE(line.find("fp32 on Small (1.080 GiB): batch 32"), std::string::npos) << line;
  EXPECT_NE(line.find(", 1.079 GiB on the device with 300.00 MiB outside the allocator; fits "
                      "with 1.00 MiB to spare"),
            std::string::npos)
      << line;
  // Apart already: as format_bytes writes them.
  p.replay.peak_reserved -= int64_t{100} << 20;
  EXPECT_NE(prediction_line("fp32", p).find("(1.08 GiB): batch 32"), std::string::npos);
}

TEST(CardPrediction, TrainMemoryWritesThePredictionAndRefusesBadCardsFirst) {
  test_support::TempDir dir;
  std::ofstream(dir / "memory.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                        "training: {device: cpu, batch_size: 8, "
                                        "memory_format: contiguous}\n";
  MemoryRequest request;
  request.config_path = (dir / "memory.yaml").string();
  request.settings = "fp32";
  request.output_dir = (dir / "study").string();
  request.card = "T5";
  EXPECT_THROW(memory_command(request), UserError);
  request.card = "771MiB";  // no larger than what lies outside the allocator
  EXPECT_THROW(memory_command(request), UserError);
  request.card = "T4";
  request.settings = "fp32+checkpointing=auto";  // the --card refusal, not "set memory.limit"
  try {
    memory_command(request);
    ADD_FAILURE() << "auto with --card was measured";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpointing auto chooses its blocks"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "study"));

  request.settings = "fp32";
  ASSERT_EQ(memory_command(request), kExitOk);
  std::ifstream in(dir / "study" / "memory_breakdown.json");
  const auto setting = nlohmann::json::parse(in).at("settings")[0];
  EXPECT_EQ(setting.at("card").at("name"), "T4");
  EXPECT_EQ(setting.at("card").at("memory_bytes"), int64_t{15360} << 20);
  EXPECT_TRUE(setting.at("fits").get<bool>());
  // Round 5: "" where nothing failed; null, as every field without a value.
  EXPECT_TRUE(setting.at("failed_in").is_null()) << setting.dump();
  EXPECT_EQ(setting.at("card").at("architecture"), "sm_75");
  const int64_t reserved = setting.at("predicted_reserved_peak_bytes");
  EXPECT_GE(reserved, setting.at("predicted_allocated_peak_bytes").get<int64_t>());
  EXPECT_EQ(setting.at("predicted_device_bytes").get<int64_t>(),
            reserved + setting.at("outside_allocator_bytes").get<int64_t>());
  EXPECT_GT(setting.at("largest_batch").get<int64_t>(), 8);
  const std::string md = test_support::read_text(dir / "study" / "memory_breakdown.md");
  EXPECT_NE(md.find("## On T4"), std::string::npos) << md;
  EXPECT_NE(md.find("Not modelled: cuDNN"), std::string::npos) << md;
  EXPECT_TRUE(setting.at("device_resident_bytes").is_null());
  // Round 5: with data.device_resident the training set on the card was left out (said, not
  // held): now both splits and the epoch's order are held from before the first step, so every
  // allocated peak is theirs higher and the largest batch no larger.
  request.output_dir = (dir / "resident").string();
  request.overrides = {"data.device_resident=true", "data.source=synthetic",
                       "data.synthetic_train_size=200000", "data.synthetic_test_size=30000"};
  ASSERT_EQ(memory_command(request), kExitOk);
  std::ifstream resident_in(dir / "resident" / "memory_breakdown.json");
  const auto resident = nlohmann::json::parse(resident_in).at("settings")[0];
  const int64_t resident_bytes = data::device_resident_bytes(200000, 30000, 200000);
  EXPECT_EQ(resident.at("device_resident_bytes"), resident_bytes);
  // Each as the allocator holds it: a large segment's remainder under 1 MiB stays in its block.
  const int64_t above = resident.at("predicted_allocated_peak_bytes").get<int64_t>() -
                        setting.at("predicted_allocated_peak_bytes").get<int64_t>();
  EXPECT_GE(above, resident_bytes);
  EXPECT_LT(above, resident_bytes + 5 * kMiB);
  EXPECT_LT(resident.at("largest_batch").get<int64_t>(),
            setting.at("largest_batch").get<int64_t>());
  EXPECT_NE(test_support::read_text(dir / "resident" / "memory_breakdown.md")
                .find("data.device_resident's splits and epoch order, 677.11 MiB"),
            std::string::npos);
  // Counted from the data it names: data missing is the data's own error, before anything runs.
  request.output_dir = (dir / "missing").string();
  request.overrides = {"data.device_resident=true", "data.root=" + (dir / "none").string()};
  try {  // said why the data is read
    memory_command(request);
    ADD_FAILURE() << "the data missing was not refused";
  } catch (const data::DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("data.device_resident: the card holds both splits, "
                                          "counted: " +
                                              (dir / "none").string() + ": no CIFAR-10 found",
                                          0),
              0u)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "missing"));
}

// The stream holds the tensors a card would hold, never a CPU kernel's own scratch (oneDNN's
// differs between AVX2, AVX-512 and AMX kernels; ATen's own kernels keep other scratch again).
// Recorded with oneDNN and without it, the streams are the same, on any CPU. (The CIFAR stem
// holds the same; ATen's own convolutions take 9 s on it here.)
TEST(CardPrediction, TheStreamIsTheSameWithOrWithoutOneDnnKernels) {
  Config config = small_config();
  struct MkldnnOff {
    MkldnnOff() { at::globalContext().setUserEnabledMkldnn(false); }
    ~MkldnnOff() { at::globalContext().setUserEnabledMkldnn(true); }
  };
  config.model = models::ResNetOptions(18).stem(models::Stem::ImageNet);
  std::vector<Setting> cells = {
      {Precision::FP32, CheckpointMode::Off, c10::MemoryFormat::Contiguous},
      {Precision::FP32, CheckpointMode::On, c10::MemoryFormat::ChannelsLast}};
  if (cpu_has_native_bf16()) {
    cells.push_back({Precision::BF16, CheckpointMode::On, c10::MemoryFormat::Contiguous});
  }
  for (const Setting& cell : cells) {
    const AllocationStream with = record_step_stream(config, cell, 2);
    AllocationStream without;
    {
      const MkldnnOff off;
      without = record_step_stream(config, cell, 2);
    }
    ASSERT_EQ(with.events.size(), without.events.size()) << cell.name();
    int64_t differing = 0;
    for (size_t i = 0; i < with.events.size(); ++i) {
      differing += with.events[i].id != without.events[i].id ||
                   with.events[i].bytes != without.events[i].bytes;
    }
    EXPECT_EQ(differing, 0) << cell.name();

    ASSERT_EQ(with.marks.size(), without.marks.size());
    for (size_t i = 0; i < with.marks.size(); ++i) {
      EXPECT_EQ(with.marks[i].event, without.marks[i].event) << with.marks[i].label;
    }
  }
}

// What `train memory --card` predicts does not depend on the CPU's kernels: recorded with oneDNN's
// AVX-512 and AVX2 kernels (ONEDNN_MAX_CPU_ISA, in child processes: oneDNN reads it once) and with
// the native ones, the peaks, their phases and the largest batch are the same. bf16 where the CPU
// computes it natively (elsewhere every child runs the same emulation). On a CPU without AVX-512
// the children would run the same kernels: skipped; the test above tells kernels apart there.
TEST(CardPrediction, APredictionIsTheSameWhicheverCpuKernelsRecordedIt) {
  const auto capabilities = at::cpu::get_cpu_capabilities();
  const auto avx512 = capabilities.find("avx512_f");
  if (avx512 == capabilities.end() || !avx512->second.toBool()) {
    GTEST_SKIP() << "no AVX-512 here: every ONEDNN_MAX_CPU_ISA gives the same AVX2 kernels";
  }
  test_support::TempDir dir;
  const fs::path config = dir / "memory.yaml";
  std::ofstream(config) << "model: {arch: resnet18, stem: imagenet}\n"
                           "training: {device: cpu, batch_size: 16, memory_format: contiguous, "
                           "threads: 2}\n";
  const std::string settings = std::string("fp32,fp32+checkpointing+channels_last") +
                               (cpu_has_native_bf16() ? ",bf16+checkpointing" : "");
  auto predicted = [&](const std::string& isa) {
    const fs::path out = dir / (isa.empty() ? "native" : isa);
    const std::string command =
        "env -u DNNL_MAX_CPU_ISA " +
        (isa.empty() ? "-u ONEDNN_MAX_CPU_ISA " : "ONEDNN_MAX_CPU_ISA=" + isa + " ") +
        TRAIN_BINARY + " memory --config " + config.string() +
        " --card H200 --card-only --settings " + settings + " --output-dir " + out.string() +
        " > " + out.string() + ".log 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << test_support::read_text(out.string() + ".log");
    std::ifstream in(out / "memory_breakdown.json");
    const nlohmann::json study = nlohmann::json::parse(in);
    nlohmann::json figures;
    for (const auto& setting : study.at("settings")) {
      for (const char* key : {"predicted_allocated_peak_bytes", "predicted_reserved_peak_bytes",
                              "predicted_peak_phase", "largest_batch", "phases"}) {
        figures[setting.at("setting").get<std::string>()][key] = setting.at(key);
      }
    }
    return figures;
  };
  const nlohmann::json native = predicted("");
  ASSERT_EQ(native.size(), cpu_has_native_bf16() ? 3u : 2u);
  for (const std::string isa : {"AVX512_CORE", "AVX2"}) {
    const nlohmann::json other = predicted(isa);
    for (const auto& [setting, figures] : native.items()) {
      for (const auto& [key, value] : figures.items()) {
        EXPECT_EQ(other.at(setting).at(key), value)
            << setting << " " << key << " under ONEDNN_MAX_CPU_ISA=" << isa;
      }
    }
  }
}

}  // namespace
}  // namespace training
