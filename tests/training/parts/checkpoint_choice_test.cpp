#include "training/parts/checkpoint_choice.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "data/dataset.h"
#include "training/parts/components.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"

namespace {

using training::BlockMeasurement;
using training::CheckpointMode;
using training::choose_blocks;
using training::Config;

// Blocks "b0", "b1", ... with these kept bytes and recompute seconds, and the windows a measured
// step has: each block's backward (holding the blocks before it) and the loss (holding all).
BlockMeasurement measurement(const std::vector<int64_t>& bytes, const std::vector<double>& seconds,
                             int64_t base_peak) {
  BlockMeasurement m;
  for (size_t i = 0; i < bytes.size(); ++i) {
    m.blocks.push_back({"b" + std::to_string(i), bytes[i], seconds[i]});
    m.windows.push_back({"backward b" + std::to_string(i), base_peak, static_cast<int64_t>(i)});
  }
  m.windows.push_back({"loss", base_peak, static_cast<int64_t>(bytes.size())});
  m.windows.push_back({"optimizer step", base_peak / 2, 0});
  return m;
}

TEST(CheckpointChoice, ThePredictedPeakAddsTheKeptBytesOfTheBlocksBeforeEachWindow) {
  BlockMeasurement m;
  m.blocks = {{"b0", 100, 1}, {"b1", 10, 1}};
  m.windows = {{"early", 1000, 1}, {"late", 950, 2}};
  EXPECT_EQ(training::predicted_peak(m, {true, true}), 1000);
  EXPECT_EQ(training::predicted_peak(m, {false, true}), 1100);
  EXPECT_EQ(training::predicted_peak(m, {true, false}), 1000);   // late: 950 + 10
  EXPECT_EQ(training::predicted_peak(m, {false, false}), 1100);  // early 1100, late 1060
}

TEST(CheckpointChoice, NothingIsRecomputedWhenThePlainStepFits) {
  const auto m = measurement({100, 200, 300}, {1, 2, 3}, 1000);
  const auto choice = choose_blocks(m, 1600);
  EXPECT_TRUE(choice.fits);
  EXPECT_TRUE(choice.blocks.empty());
  EXPECT_EQ(choice.predicted_peak, 1600);
  EXPECT_EQ(choice.plain_peak, 1600);
  EXPECT_EQ(choice.smallest_peak, 1000);
  EXPECT_EQ(choice.extra_seconds, 0);
  EXPECT_EQ(choice.all_extra_seconds, 6);
}

TEST(CheckpointChoice, NothingFitsWhenEveryBlockRecomputedExceedsTheBudget) {
  const auto m = measurement({100, 200, 300}, {1, 2, 3}, 1000);
  const auto choice = choose_blocks(m, 999);
  EXPECT_FALSE(choice.fits);
  EXPECT_EQ(choice.smallest_peak, 1000);
  EXPECT_EQ(choice.predicted_peak, 1000);
  // Exactly the smallest peak fits, with every block recomputed.
  const auto tight = choose_blocks(m, 1000);
  EXPECT_TRUE(tight.fits);
  EXPECT_EQ(tight.blocks, (std::vector<std::string>{"b0", "b1", "b2"}));
}

TEST(CheckpointChoice, TheCheapestSetThatSavesEnoughIsChosenNotTheLargest) {
  // 250 bytes must go: b2 alone (300 bytes, 5 s) costs more than b0 + b1 (300 bytes, 1 + 1 s).
  const auto m = measurement({100, 200, 300}, {1, 1, 5}, 1000);
  const auto choice = choose_blocks(m, 1350);
  ASSERT_TRUE(choice.fits);
  EXPECT_EQ(choice.blocks, (std::vector<std::string>{"b0", "b1"}));
  EXPECT_EQ(choice.predicted_peak, 1300);
  EXPECT_DOUBLE_EQ(choice.extra_seconds, 2);
}

TEST(CheckpointChoice, AnEarlyWindowIsMetByRecomputingTheBlocksBeforeIt) {
  // The window after b0 (b1's backward, 1200 with nothing before it) allows 100 bytes of b0; b0
  // keeps 150, so b0 must be recomputed although b1 would save more for less at the loss.
  BlockMeasurement m;
  m.blocks = {{"b0", 150, 4}, {"b1", 400, 1}};
  m.windows = {{"backward b1", 1200, 1}, {"loss", 800, 2}};
  const auto choice = choose_blocks(m, 1300);
  ASSERT_TRUE(choice.fits);
  EXPECT_EQ(choice.blocks, (std::vector<std::string>{"b0"}));
  EXPECT_EQ(choice.predicted_peak, 1200);  // the loss: 800 + 400
}

TEST(CheckpointChoice, TiesGoToFewerBlocksThenToTheLowerPeakAndAreStable) {
  // Equal times: one block of 100 s instead of two of 50 s each.
  auto m = measurement({100, 100, 200}, {50, 50, 100}, 1000);
  auto choice = choose_blocks(m, 1250);
  ASSERT_TRUE(choice.fits);
  EXPECT_EQ(choice.blocks, (std::vector<std::string>{"b2"}));
  // Equal times and counts: recomputing b1 (200 bytes) leaves the lower peak than b0 (100).
  m = measurement({100, 200}, {1, 1}, 1000);
  choice = choose_blocks(m, 1250);
  ASSERT_TRUE(choice.fits);
  EXPECT_EQ(choice.blocks, (std::vector<std::string>{"b1"}));
  EXPECT_EQ(choice.predicted_peak, 1100);
  // Identical blocks: one of them, the same one every time.
  m = measurement({100, 100}, {1, 1}, 1000);
  choice = choose_blocks(m, 1150);
  ASSERT_EQ(choice.blocks.size(), 1u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(choose_blocks(m, 1150).blocks, choice.blocks);
}

// The dynamic programme against every subset, on random measurements small enough to be exact.
TEST(CheckpointChoice, TheChoiceIsTheCheapestOfEverySubsetThatFits) {
  std::mt19937 random(7);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + random() % 9;
    BlockMeasurement m;
    for (size_t i = 0; i < n; ++i) {
      m.blocks.push_back({"b" + std::to_string(i), static_cast<int64_t>(random() % 500),
                          static_cast<double>(1 + random() % 20)});
    }
    for (int w = 0; w < 6; ++w) {
      m.windows.push_back({"w" + std::to_string(w), static_cast<int64_t>(1000 + random() % 800),
                           static_cast<int64_t>(random() % (n + 1))});
    }
    const int64_t budget = 1500 + static_cast<int64_t>(random() % 1500);
    double best = -1;
    size_t best_count = 0;
    for (uint32_t set = 0; set < (1u << n); ++set) {
      std::vector<bool> recomputed(n);
      double seconds = 0;
      size_t count = 0;
      for (size_t i = 0; i < n; ++i) {
        recomputed[i] = (set >> i) & 1;
        if (recomputed[i]) seconds += m.blocks[i].recompute_seconds, ++count;
      }
      if (training::predicted_peak(m, recomputed) > budget) continue;
      if (best < 0 || seconds < best || (seconds == best && count < best_count)) {
        best = seconds;
        best_count = count;
      }
    }
    const auto choice = choose_blocks(m, budget);
    ASSERT_EQ(choice.fits, best >= 0) << "round " << round;
    if (!choice.fits) continue;
    EXPECT_EQ(choice.extra_seconds, best) << "round " << round;
    EXPECT_EQ(choice.blocks.size(), best_count) << "round " << round;
    EXPECT_LE(choice.predicted_peak, budget) << "round " << round;
  }
}

TEST(CheckpointChoice, LargeByteCountsAreRoundedTowardsTheBudgetNeverPastIt) {
  const int64_t GiB = int64_t{1} << 30;
  auto m = measurement({3 * GiB + 7, 5 * GiB + 3, 2 * GiB + 1}, {1, 2, 3}, 20 * GiB);
  for (const int64_t budget : {20 * GiB, 23 * GiB, 25 * GiB + 10, 30 * GiB + 11}) {
    const auto choice = choose_blocks(m, budget);
    ASSERT_TRUE(choice.fits);
    EXPECT_LE(choice.predicted_peak, budget);
  }
}

Config auto_config() {
  Config config = training::parse_config(
      "model: {arch: resnet18}\ntraining: {device: cpu, batch_size: 4}\n"
      "checkpointing: {enabled: auto}\ndata: {source: synthetic}\n",
      "c.yaml");
  return config;
}

TEST(CheckpointChoice, TheBudgetIsGivenOrTheLimitLessTheHeadroomOrRefused) {
  Config config = auto_config();
  const torch::Device cpu(torch::kCPU);
  try {
    training::checkpointing_budget(config, cpu);
    ADD_FAILURE() << "a CPU without memory.limit or a budget was not refused";
  } catch (const training::KeyError& e) {
    EXPECT_EQ(e.key(), "checkpointing.enabled");
    EXPECT_NE(std::string(e.what()).find("set memory.limit"), std::string::npos) << e.what();
  }
  config.memory.limit = 1000;
  EXPECT_EQ(training::checkpointing_budget(config, cpu).bytes, 900);
  config.checkpointing.headroom(0.25);
  EXPECT_EQ(training::checkpointing_budget(config, cpu).bytes, 750);
  config.checkpointing.budget(640);
  EXPECT_EQ(training::checkpointing_budget(config, cpu).bytes, 640);
  EXPECT_EQ(training::checkpointing_budget(config, cpu).source, "checkpointing.budget");
}

// A measurement of ResNet-18's first two blocks (100 and 200 bytes kept, 1 s each, windows at
// 1000 bytes), counting how often it is taken.
training::MeasureBlocks two_blocks_counting(int& measured) {
  return [&measured](const Config&, const torch::Device&) {
    ++measured;
    BlockMeasurement m = measurement({100, 200}, {1, 1}, 1000);
    m.blocks[0].name = "layer1.0";
    m.blocks[1].name = "layer1.1";
    return m;
  };
}

// The choice two_blocks_counting's measurement gives under a budget of 1250 bytes, recorded (one
// block recomputed, the plain step's peak 1300).
struct RecordedChoice {
  Config config = auto_config();
  int measured = 0;
  training::MeasureBlocks measure = two_blocks_counting(measured);
  torch::Device cpu{torch::kCPU};
  training::Decisions recorded;
  RecordedChoice() {
    config.checkpointing.budget(1250);
    training::resolve_checkpointing(config, recorded, cpu, false, measure);
  }
  RecordedChoice(const RecordedChoice&) = delete;  // `measure` counts into this one's `measured`
};

TEST(CheckpointChoice, TheChoiceIsTheRunsDecisionAndNotMadeAgain) {
  Config config = auto_config();
  config.checkpointing.budget(1250);
  int measured = 0;
  const auto measure = two_blocks_counting(measured);
  const torch::Device cpu(torch::kCPU);
  training::Decisions decisions;
  const auto choice = training::resolve_checkpointing(config, decisions, cpu, false, measure);
  ASSERT_TRUE(choice);
  EXPECT_EQ(measured, 1);
  ASSERT_TRUE(decisions.checkpointing);
  EXPECT_EQ(decisions.checkpointing->blocks, (std::vector<std::string>{"layer1.1"}));
  EXPECT_EQ(decisions.checkpointing->predicted_peak, 1100);
  EXPECT_DOUBLE_EQ(decisions.checkpointing->predicted_extra_ms, 1000);
  // The config stays as asked; the run builds from it with the decision in place.
  EXPECT_FALSE(config.checkpointing.blocks());
  EXPECT_EQ(training::decided(config, decisions).checkpointing.blocks(),
            decisions.checkpointing->blocks);
  // decisions.json reads back to the same choice, which is taken as made.
  auto back = training::parse_decisions(training::decisions_json(decisions), "decisions.json");
  EXPECT_FALSE(training::resolve_checkpointing(config, back, cpu, false, measure));
  EXPECT_EQ(measured, 1);
  ASSERT_TRUE(back.checkpointing);
  EXPECT_EQ(back.checkpointing->blocks, decisions.checkpointing->blocks);
  // A recorded choice that holds works with data parallelism; a choice to make is refused there.
  EXPECT_FALSE(training::resolve_checkpointing(config, back, cpu, true, measure));
  training::Decisions none;
  EXPECT_THROW(training::resolve_checkpointing(config, none, cpu, true, measure),
               training::KeyError);
}

TEST(CheckpointChoice, ARecordedChoiceIsChosenAgainWhenItsStepOrBudgetNoLongerHolds) {
  RecordedChoice choice;
  auto& [config, measured, measure, cpu, recorded] = choice;
  ASSERT_TRUE(recorded.checkpointing);
  EXPECT_EQ(recorded.checkpointing->chosen_for,
            "resnet18 cifar stem, 10 classes, batch 4, fp32, contiguous, sgd with momentum, "
            "nesterov, weight decay, fused, on " +
                training::device_identity(cpu));
  EXPECT_EQ(recorded.checkpointing->budget, 1250);
  // A larger budget that holds no cheaper choice keeps it, now checked against that budget.
  Config larger = config;
  larger.checkpointing.budget(1299);
  auto kept = recorded;
  EXPECT_FALSE(training::resolve_checkpointing(larger, kept, cpu, false, measure));
  EXPECT_EQ(measured, 1);
  EXPECT_EQ(kept.checkpointing->budget, 1299);
  // Another batch: chosen again, saying why; with data parallelism refused, saying why.
  Config rebatched = config;
  rebatched.training.batch_size = 8;
  try {
    auto ranked = recorded;
    training::resolve_checkpointing(rebatched, ranked, cpu, true, measure);
    ADD_FAILURE() << "a choice that no longer holds was not refused with data parallelism";
  } catch (const training::KeyError& e) {
    EXPECT_EQ(e.key(), "checkpointing.enabled");
    EXPECT_NE(std::string(e.what()).find("batch 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(measured, 1);
  auto again_decided = recorded;
  const auto again = training::resolve_checkpointing(rebatched, again_decided, cpu, false, measure);
  ASSERT_TRUE(again);
  EXPECT_EQ(measured, 2);
  EXPECT_NE(again->note.find("it was chosen for resnet18 cifar stem, 10 classes, batch 4, fp32, "
                             "contiguous, sgd with momentum, nesterov, weight decay, fused, on " +
                             training::device_identity(cpu) +
                             ", and this run is resnet18 cifar stem, 10 classes, batch 8, fp32, "
                             "contiguous, sgd"),
            std::string::npos)
      << again->note;
  // A budget below the predicted peak (1100): chosen again for it.
  Config smaller = config;
  smaller.checkpointing.budget(1050);
  auto tighter_decided = recorded;
  const auto tighter =
      training::resolve_checkpointing(smaller, tighter_decided, cpu, false, measure);
  ASSERT_TRUE(tighter);
  EXPECT_EQ(measured, 3);
  EXPECT_NE(tighter->note.find("its predicted peak 1.07 KiB is above this run's budget"),
            std::string::npos)
      << tighter->note;
  EXPECT_EQ(tighter_decided.checkpointing->blocks,
            (std::vector<std::string>{"layer1.0", "layer1.1"}));
  // Blocks given by hand are used as given: nothing decided, a recorded decision dropped.
  Config by_hand = auto_config();
  by_hand.checkpointing.blocks(std::vector<std::string>{"layer2.0"});
  auto hand_decided = recorded;
  EXPECT_FALSE(training::resolve_checkpointing(by_hand, hand_decided, cpu, false, measure));
  EXPECT_FALSE(hand_decided.checkpointing);
  EXPECT_EQ(measured, 3);
}

// Round 5: a choice resumed with another number of micro-batches per step was kept and ran out of
// memory in the next epoch. Whatever changes the measured step (its model, micro-batch and
// micro-batches, precision, layout, optimizer, weight average) makes the recorded choice lapse.
TEST(CheckpointChoice, ARecordedChoiceHoldsOnlyForTheStepItWasMadeFor) {
  RecordedChoice choice;
  auto& [config, measured, measure, cpu, recorded] = choice;
  ASSERT_TRUE(recorded.checkpointing);
  const std::vector<std::pair<std::string, std::function<void(Config&)>>> changes = {
      {"batch", [](Config& c) { c.training.batch_size = 8; }},
      {"micro-batches", [](Config& c) { c.training.accumulate_steps = 2; }},
      {"precision", [](Config& c) { c.training.precision = training::Precision::FP16; }},
      {"layout", [](Config& c) { c.training.memory_format = c10::MemoryFormat::ChannelsLast; }},
      {"depth", [](Config& c) { c.model.depth(34); }},
      {"stem", [](Config& c) { c.model.stem(models::Stem::ImageNet); }},
      {"classes", [](Config& c) { c.model.num_classes(100); }},
      {"momentum", [](Config& c) { c.optimizer.momentum(0).nesterov(false); }},
      {"nesterov", [](Config& c) { c.optimizer.nesterov(false); }},
      {"weight decay", [](Config& c) { c.optimizer.weight_decay(0); }},
      {"decayed parameters", [](Config& c) { c.optimizer.decay_norm_and_bias(true); }},
      {"fused", [](Config& c) { c.optimizer.fused(false); }},
      {"weight average", [](Config& c) { c.training.ema_decay = 0.999; }},
  };
  for (const auto& [what, change] : changes) {
    Config changed = config;
    change(changed);
    auto decisions = recorded;
    const int before = measured;
    const auto again = training::resolve_checkpointing(changed, decisions, cpu, false, measure);
    ASSERT_TRUE(again) << what << ": the recorded choice was kept";
    EXPECT_EQ(measured, before + 1) << what;
    EXPECT_NE(again->note.find("it was chosen for " + recorded.checkpointing->chosen_for +
                               ", and this run is " + training::step_signature(changed, cpu)),
              std::string::npos)
        << what << ": " << again->note;
    EXPECT_NE(training::step_signature(changed, cpu), recorded.checkpointing->chosen_for) << what;
  }
  // What does not change the step keeps it: the epochs, the learning rate, the seed, another
  // momentum or weight decay above 0 (the thirteenth review: they measured the step again).
  Config same = config;
  same.training.epochs = 3;
  same.optimizer.lr(0.5);
  same.training.seed = 7;
  same.optimizer.momentum(0.85).weight_decay(0.0004);
  auto kept = recorded;
  EXPECT_FALSE(training::resolve_checkpointing(same, kept, cpu, false, measure));
}

// The thirteenth review: a choice made under a small budget was kept under a larger one, and
// recomputed blocks the larger budget needs not recompute. From the budget a cheaper choice fits
// (recorded as cheaper_from), it is chosen again; below it the choice is kept.
TEST(CheckpointChoice, ARecordedChoiceIsChosenAgainUnderABudgetThatHoldsACheaperOne) {
  // Plain peak 1300; at 1250 one block is recomputed; keeping both fits from 1300 on.
  const auto m = measurement({100, 200}, {1, 2}, 1000);
  const auto chosen = choose_blocks(m, 1250);
  ASSERT_EQ(chosen.blocks.size(), 1u);
  EXPECT_EQ(training::cheaper_budget(m, chosen), 1300);
  EXPECT_EQ(training::cheaper_budget(m, choose_blocks(m, 1300)), 0);  // nothing recomputed
  const auto both = choose_blocks(m, 1050);  // both recomputed; b1 alone (2 s) fits from 1100
  ASSERT_EQ(both.blocks.size(), 2u);
  EXPECT_EQ(training::cheaper_budget(m, both), 1100);

  RecordedChoice choice;
  auto& [config, measured, measure, cpu, recorded] = choice;
  ASSERT_TRUE(recorded.checkpointing);
  EXPECT_EQ(recorded.checkpointing->cheaper_from, 1300);
  const auto back = training::parse_decisions(training::decisions_json(recorded), "decisions.json");
  EXPECT_EQ(back.checkpointing->cheaper_from, 1300);
  Config larger = config;
  larger.checkpointing.budget(1300);
  auto decisions = recorded;
  const auto again = training::resolve_checkpointing(larger, decisions, cpu, false, measure);
  ASSERT_TRUE(again);
  EXPECT_EQ(measured, 2);
  EXPECT_TRUE(again->blocks.empty());
  EXPECT_NE(again->note.find("this run's budget 1.27 KiB holds a cheaper choice"),
            std::string::npos)
      << again->note;
}

// What the run holds beside the measured step counts on the CPU too: data.prefetch 2 left out ran
// out of memory after step 1 under the limit the choice was made for. Round 5: two batches were
// counted where the loader holds two ready, one more in preparation with its temporaries, and the
// epoch's order; the choice then ran out of memory at step 2. What a loader that stays ahead of a
// slow consumer holds beside the consumer's batch is at most what is counted.
TEST(CheckpointChoice, WhatTheLoaderHoldsBesideTheStepIsCountedAsItHoldsIt) {
  auto config = training::parse_config(
      "model: {arch: resnet18, stem: cifar}\ntraining: {device: cpu, batch_size: 32}\n"
      "data: {prefetch: 2, source: synthetic}\n",
      "test");
  const torch::Device cpu(torch::kCPU);
  const int64_t batches = 6, batch = 32 * 3 * 32 * 32 * 4 + 32 * 8;
  data::Split split;
  {
    training::TrackingCpuAllocator::HostData host_data;
    split = data::make_synthetic(32 * batches, 0);
  }
  const int64_t beside = training::held_beside_step(config, cpu, split, 0);
  EXPECT_GE(beside, 3 * batch + split.size() * 8);  // 2 ready, 1 in preparation (at least a batch)

  const auto loader = training::make_loader(split, config, cpu, /*train=*/true, nullptr);
  training::reset_peak_memory(cpu);
  const int64_t before = training::memory_stats(cpu).allocated;
  loader->start_epoch(0);
  int64_t seen = 0;
  while (auto next = loader->next()) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(30));  // the step: the producer runs ahead
    ++seen;
  }
  EXPECT_EQ(seen, batches);
  const int64_t held = training::memory_stats(cpu).peak_allocated - before;
  EXPECT_GT(held, 3 * batch);  // the queue filled: the test tried what it says
  EXPECT_LE(held, beside + batch) << "the consumer's batch and what was counted beside it";

  config.data.prefetch = 0;  // prepared between steps: only the order is held beside the step
  EXPECT_EQ(training::held_beside_step(config, cpu, split, 0), split.size() * 8);
  // On the CPU both splits are host data, with data.device_resident too (on CUDA they are held).
  config.data.device_resident = true;
  EXPECT_EQ(training::held_beside_step(config, cpu, split, 10000), split.size() * 8);
}

// The run's measured peak holds what the run holds beside the step: it is compared with the budget
// and that (round 5: a run within its limit was warned "exceeds the budget by 569.06 KiB").
TEST(CheckpointChoice, TheOutcomeComparesTheRunsPeakWithTheBudgetAndWhatIsHeldBesideTheStep) {
  const training::CheckpointingDecision d{{"layer1.0"}, "a step", 1000, 900, 1, 300};
  bool exceeded = true;
  EXPECT_EQ(training::checkpointing_outcome(d, 1250, &exceeded),
            "measured training peak 1.22 KiB, predicted 1.17 KiB: within the budget of 1000 B and "
            "the 300 B beside the step");
  EXPECT_FALSE(exceeded);
  EXPECT_EQ(training::checkpointing_outcome(d, 1400, &exceeded),
            "the measured training peak 1.37 KiB exceeds the budget of 1000 B and the 300 B beside "
            "the step by 100 B (predicted 1.17 KiB)");
  EXPECT_TRUE(exceeded);
  // Sixteenth pass: "predicted 155.10 MiB: within the budget of 155.10 MiB", 4,181 bytes apart.
  const training::CheckpointingDecision near{{"layer1.0"}, "a step", 162633113, 162628932, 1, 0};
  EXPECT_EQ(training::checkpointing_outcome(near, 150000000, &exceeded),
            "measured training peak 143.051 MiB, predicted 155.095 MiB: within the budget of "
            "155.099 MiB");
  // Sixteenth pass: the choice's line wrote its budget apart from its peak ("149.999 MiB"), the
  // outcome apart from its own figures ("150.00 MiB"): one budget, two precisions.
  const int64_t mib = 1 << 20;
  const training::CheckpointingDecision edge{{"layer1.0"},     "a step", 150 * mib - 1000,
                                             150 * mib - 2000, 1,        10 * mib};
  EXPECT_EQ(training::checkpointing_outcome(edge, 155 * mib, &exceeded),
            "measured training peak 155.000 MiB, predicted 159.998 MiB: within the budget of "
            "149.999 MiB and the 10.00 MiB beside the step");
  // Eighteenth pass: the other way, "150.00 MiB" in the choice's line and "150.000 MiB" in the
  // outcome, where the measured peak came near it: the budget as the choice's line wrote it.
  const training::CheckpointingDecision round{{"layer1.0"}, "a step", 150 * mib, 140 * mib, 1, 0};
  EXPECT_EQ(training::budget_text(round, 0), "150.00 MiB");
  EXPECT_EQ(training::checkpointing_outcome(round, 150 * mib + 1000, &exceeded),
            "the measured training peak 150.001 MiB exceeds the budget of 150.00 MiB by 1000 B "
            "(predicted 140.000 MiB)");
}

// Accumulating, the choice measures a group's second micro-batch, which holds the first one's
// gradients, and takes nothing more off the budget for them: ResNet-18 at batch 16 in 2 micro-
// batches trains in 153 MiB, and a 180 MiB limit (162 MiB less the headroom) needs no
// recomputation. It was refused ("nothing fits the budget of 119.35 MiB"): the gradients were
// taken off the budget beside a one-micro-batch measurement.
// The measured step of an accumulating run holds the first micro-batch's gradients; the choice
// counts them once. The limit is derived from this CPU's own measurement (peaks differ between
// CPUs' kernels): its budget holds the plain step with a quarter of the gradients to spare, so
// the step fits as measured, and would not with the gradients counted twice.
TEST(CheckpointChoice, AccumulationIsMeasuredWithTheGradientsHeldAndCountedOnce) {
  auto config = training::parse_config(
      "model: {arch: resnet18, stem: imagenet}\n"
      "training: {device: cpu, batch_size: 16, accumulate_steps: 2}\n"
      "checkpointing: {enabled: auto}\n",
      "test");
  const torch::Device cpu(torch::kCPU);
  const BlockMeasurement measured = training::measure_blocks(config, cpu);
  const auto measure = [&](const Config&, const torch::Device&) { return measured; };
  const int64_t plain = choose_blocks(measured, int64_t{1} << 50).plain_peak;
  int64_t gradients = 0;
  Config plain_model = config;
  plain_model.checkpointing.mode(CheckpointMode::Off);
  for (const auto& p : training::build_model(plain_model, cpu)->parameters()) {
    gradients += p.numel() * static_cast<int64_t>(p.element_size());
  }
  const int64_t beside = training::held_beside_step(config, cpu, data::make_synthetic(64, 0), 0);
  config.memory.limit = static_cast<int64_t>(std::ceil(
      static_cast<double>(plain + beside + gradients / 4) / (1 - config.checkpointing.headroom())));
  training::Decisions accumulating;
  const auto choice =
      training::resolve_checkpointing(config, accumulating, cpu, false, measure, beside);
  ASSERT_TRUE(choice);
  EXPECT_TRUE(choice->blocks.empty()) << training::describe_choice(*choice);
  ASSERT_TRUE(accumulating.checkpointing);
  EXPECT_TRUE(accumulating.checkpointing->blocks.empty());
  // The prediction holds the gradients: above a 1-micro-batch step's peak.
  auto single = config;
  single.training.accumulate_steps = 1;
  single.memory.limit = 0;
  single.checkpointing.budget(int64_t{1} << 50);
  training::Decisions one;
  const auto alone = training::resolve_checkpointing(single, one, cpu, false, {}, 0);
  ASSERT_TRUE(alone);
  EXPECT_GT(accumulating.checkpointing->predicted_peak, one.checkpointing->predicted_peak);
}

TEST(CheckpointChoice, ABudgetNothingFitsIsOutOfMemoryNamingTheBudgetAndTheSmallestPeak) {
  Config config = auto_config();
  config.checkpointing.budget(900);
  const auto measure = [](const Config&, const torch::Device&) {
    return measurement({100, 200}, {1, 1}, 1000);
  };
  training::Decisions decisions;
  try {
    training::resolve_checkpointing(config, decisions, torch::Device(torch::kCPU), false, measure);
    ADD_FAILURE() << "not refused";
  } catch (const training::OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("nothing fits the budget of 900 B"), std::string::npos) << what;
    EXPECT_NE(what.find("peaks at 1000 B"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos);
    // Round 5: a smaller batch or bf16 was offered where the weights, their gradients and
    // momentum alone exceed the budget: only more memory or a smaller model helps (hostile pass:
    // with the budget given, a larger checkpointing.budget).
    EXPECT_NE(what.find("the weights and their gradients and momentum alone take "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(": a larger checkpointing.budget or a smaller model.arch"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find("training.batch_size"), std::string::npos) << what;
  }
  EXPECT_FALSE(decisions.checkpointing);
  // A weight average's copy of the weights is counted with them, and said (the same remedy as
  // out of memory in a step: weights_alone_remedy).
  config.training.ema_decay = 0.99;
  try {
    training::resolve_checkpointing(config, decisions, torch::Device(torch::kCPU), false, measure);
    ADD_FAILURE() << "not refused";
  } catch (const training::OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the weights and their gradients and momentum and the weight average "
                        "(training.ema_decay) alone take " +
                        training::format_bytes(training::held_whatever_the_batch(config).bytes)),
              std::string::npos)
        << what;
  }
  config.training.ema_decay = 0.0;
  // Above what they take, the batch and the precision are the remedies: a smaller batch where the
  // smallest that trains fits (measured there).
  config.checkpointing.budget(int64_t{1} << 30);
  std::vector<int64_t> batches;
  const auto large = [&](const Config& at, const torch::Device&) {
    batches.push_back(at.training.batch_size);
    return measurement({100, 200}, {1, 1}, at.training.batch_size * (int64_t{512} << 20));
  };
  try {
    training::resolve_checkpointing(config, decisions, torch::Device(torch::kCPU), false, large);
    ADD_FAILURE() << "not refused";
  } catch (const training::OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("; a smaller training.batch_size"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(batches, (std::vector<int64_t>{config.training.batch_size, 1}));
  // Sixteenth pass: where the step holds more than the budget whatever the batch (oneDNN's
  // weight-gradient scratch beside ResNet-18's weights: 149.46 MiB at batch 2, 153.02 MiB at
  // 16, against 144 MiB), a smaller batch was advised, and typed back it did not fit either.
  const auto whatever = [](const Config&, const torch::Device&) {
    return measurement({100, 200}, {1, 1}, int64_t{2} << 30);
  };
  try {
    training::resolve_checkpointing(config, decisions, torch::Device(torch::kCPU), false, whatever);
    ADD_FAILURE() << "not refused";
  } catch (const training::OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("training.batch_size"), std::string::npos) << what;
    EXPECT_NE(what.find("at batch " + std::to_string(config.training.batch_size) + " peaks at"),
              std::string::npos)
        << what;
  }
  // So too where the measurement at the run's batch itself runs out of memory.
  const auto runs_out = [](const Config& at, const torch::Device&) {
    TORCH_CHECK_WITH(OutOfMemoryError, at.training.batch_size == 1,
                     "CPU out of memory (tracked): tried to allocate 36.02 MiB");
    return measurement({100, 200}, {1, 1}, int64_t{2} << 30);
  };
  try {
    training::resolve_checkpointing(config, decisions, torch::Device(torch::kCPU), false, runs_out);
    ADD_FAILURE() << "not refused";
  } catch (const training::OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ran out of memory while it was measured"), std::string::npos) << what;
    EXPECT_EQ(what.find("training.batch_size"), std::string::npos) << what;
  }
}

// Hostile pass: out of memory offers "checkpointing.enabled: auto or true", and auto at the
// default headroom said "nothing fits ...; ..., or more memory" where every block recomputed fit
// memory.limit and headroom 0 trained. Where the headroom is what stands in the way, the line
// names checkpointing.headroom and the most that fits; typed back, it fits. Where the budget is
// checkpointing.budget, the line names a budget that fits, not more memory.
TEST(CheckpointChoice, NothingFitsNamesTheHeadroomOrTheBudgetWhereThatStandsInTheWay) {
  const torch::Device cpu(torch::kCPU);
  const int64_t mib = int64_t{1} << 20, smallest = 950 * mib, beside = 10 * mib;
  const auto measure = [&](const Config&, const torch::Device&) {
    return measurement({100 * mib, 200 * mib}, {1, 1}, smallest);
  };
  auto refusal = [&](const Config& config) {
    training::Decisions decisions;
    try {
      training::resolve_checkpointing(config, decisions, cpu, false, measure, beside);
    } catch (const training::OutOfMemory& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Config config = auto_config();
  config.memory.limit = 1024 * mib;  // every block recomputed and beside: 960 MiB, 93.75%
  std::string what = refusal(config);
  ASSERT_NE(what.find("nothing fits the budget of"), std::string::npos) << what;
  const std::string named = "or checkpointing.headroom at most ";
  const auto at = what.find(named);
  ASSERT_NE(at, std::string::npos) << what;
  EXPECT_NE(what.find("(now 10%"), std::string::npos) << what;
  const double most = std::stod(what.substr(at + named.size()));
  EXPECT_GT(most, 5.5) << what;
  EXPECT_LE(most, 6.25) << what;
  config.checkpointing.headroom(most / 100);  // typed back, it fits
  EXPECT_EQ(refusal(config), "") << most;
  // Where every block recomputed exceeds memory.limit itself, no headroom helps.
  config.memory.limit = 900 * mib;
  what = refusal(config);
  EXPECT_EQ(what.find(named), std::string::npos) << what;
  EXPECT_NE(what.find("or more memory"), std::string::npos) << what;
  // checkpointing.budget without memory.limit: a budget that fits, not more memory.
  config.memory.limit = 0;
  config.checkpointing.budget(900 * mib);
  what = refusal(config);
  ASSERT_NE(what.find("nothing fits the budget of"), std::string::npos) << what;
  EXPECT_EQ(what.find("more memory"), std::string::npos) << what;
  const std::string larger = "or a checkpointing.budget of at least ";
  ASSERT_NE(what.find(larger), std::string::npos) << what;
  EXPECT_NE(what.find(training::format_bytes(smallest + beside)), std::string::npos) << what;
  config.checkpointing.budget(smallest + beside);
  EXPECT_EQ(refusal(config), "");
  // Where the weights alone exceed a given budget, the budget is named there too.
  config.checkpointing.budget(mib);
  what = refusal(config);
  EXPECT_NE(what.find("alone take"), std::string::npos) << what;
  EXPECT_NE(what.find("a larger checkpointing.budget or a smaller model.arch"), std::string::npos)
      << what;
}

TEST(CheckpointChoice, TheConfigRefusesBlocksWithoutAutoAndBlocksTheModelHasNot) {
  const std::string model = "model: {arch: resnet18}\n";
  auto error_of = [&](const std::string& yaml) {
    try {
      training::parse_config(model + yaml, "c.yaml");
    } catch (const training::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error_of("checkpointing: {enabled: auto, blocks: [layer1.0, layer4.1]}"), "accepted");
  EXPECT_EQ(error_of("checkpointing: {enabled: auto, blocks: []}"), "accepted");
  EXPECT_NE(error_of("checkpointing: {enabled: true, blocks: [layer1.0]}")
                .find("c.yaml: checkpointing.blocks: is the choice of checkpointing.enabled: auto"),
            std::string::npos);
  EXPECT_NE(error_of("checkpointing: {enabled: auto, blocks: [layer4.2]}")
                .find("'layer4.2' is not a block of resnet18 (layer1.0 ... layer4.1)"),
            std::string::npos);
  EXPECT_NE(error_of("checkpointing: {enabled: auto, blocks: [layer1.0, layer1.0]}")
                .find("'layer1.0' is listed twice"),
            std::string::npos);
  EXPECT_NE(error_of("checkpointing: {enabled: maybe}")
                .find("checkpointing.enabled: expected true, false or auto, got 'maybe'"),
            std::string::npos);
  EXPECT_NE(error_of("checkpointing: {enabled: auto, blocks: 3}")
                .find("checkpointing.blocks: expected a list of names or null"),
            std::string::npos);
}

// The measurement on a real model: every block keeps bytes when not recomputed, and the prediction
// with every block recomputed is the peak the measured step reached.
TEST(CheckpointChoice, MeasuringAResNetGivesEachBlocksBytesAndTheStepsWindows) {
  Config config = auto_config();
  const auto m = training::measure_blocks(config, torch::Device(torch::kCPU));
  ASSERT_EQ(m.blocks.size(), 8u);
  EXPECT_EQ(m.blocks.front().name, "layer1.0");
  EXPECT_EQ(m.blocks.back().name, "layer4.1");
  for (const auto& block : m.blocks) {
    EXPECT_GT(block.kept_bytes, 0) << block.name;
    EXPECT_GT(block.recompute_seconds, 0) << block.name;
  }
  // Forward: the stem, 8 blocks, the head and loss; backward: the loss and head, 8 blocks, the
  // stem; the optimizer step.
  EXPECT_EQ(m.windows.size(), 21u);
  const auto all = training::choose_blocks(m, int64_t{1} << 40);
  EXPECT_GT(all.plain_peak, all.smallest_peak);
}

// Eighth hostile pass: "budget 185.00 MiB (memory.limit 185.00 MiB less checkpointing.headroom
// 0% less 2.00 KiB the run holds beside the step ...)": the budget and the memory it comes from,
// in one line, read alike where they differ by 2 KiB.
TEST(CheckpointChoice, TheBudgetIsWrittenApartFromTheMemoryItComesFrom) {
  const int64_t mib = int64_t{1} << 20, limit = 185 * mib, budget = limit - 2048;
  const auto [peak, text] = training::peak_and_budget_text(180 * mib, budget, limit);
  EXPECT_EQ(peak, "180.00 MiB");
  EXPECT_EQ(text, "184.998 MiB");
  training::CheckpointChoice choice;
  choice.fits = true;
  choice.budget = budget;
  choice.budget_named = limit;
  choice.plain_peak = 180 * mib;
  choice.budget_source = "memory.limit " + training::format_bytes(limit) + " less ...";
  const std::string line = training::describe_choice(choice);
  EXPECT_EQ(line.rfind("budget 184.998 MiB (memory.limit 185.00 MiB less ...)", 0), 0u) << line;
  // Where they read apart already, or the source names no memory, as format_bytes_apart writes.
  EXPECT_EQ(training::peak_and_budget_text(180 * mib, 170 * mib, limit).second, "170.00 MiB");
  EXPECT_EQ(training::peak_and_budget_text(180 * mib, budget, 0).second, "185.00 MiB");
}

}  // namespace
