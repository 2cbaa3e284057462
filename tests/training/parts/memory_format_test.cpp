#include "training/parts/memory_format.h"

#include <ATen/Version.h>
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "training/platform/device.h"
#include "training/platform/memory.h"

namespace {

training::Config layout_config(const std::string& training) {
  return training::parse_config(
      "model: {arch: resnet18, stem: imagenet}\ntraining: {device: cpu" + training + "}\n",
      "layout");
}

// A fake timer: the rate of each layout, and the layouts it was asked to time.
struct FakeRates {
  double contiguous = 0, channels_last = 0;
  std::vector<c10::MemoryFormat> asked;
  training::MeasureRate measure() {
    return [this](const training::Config& c, const torch::Device&) {
      asked.push_back(*c.training.memory_format);
      return *c.training.memory_format == c10::MemoryFormat::ChannelsLast ? channels_last
                                                                          : contiguous;
    };
  }
};

TEST(MemoryFormat, AutoIsTheDefaultAndReadsBack) {
  const auto config = layout_config("");
  EXPECT_FALSE(config.training.memory_format.has_value());
  EXPECT_NE(training::to_yaml(config).find("memory_format: auto"), std::string::npos);
  EXPECT_EQ(*layout_config(", memory_format: channels_last").training.memory_format,
            c10::MemoryFormat::ChannelsLast);
}

// On the CPU both layouts are timed and the faster kept, whichever it is.
TEST(MemoryFormat, AutoKeepsTheFasterLayoutTimedOnTheCpu) {
  for (const auto& [contiguous, channels_last, expected] :
       {std::tuple{10.0, 25.0, c10::MemoryFormat::ChannelsLast},
        std::tuple{161.0, 157.0, c10::MemoryFormat::Contiguous}}) {
    FakeRates rates{contiguous, channels_last, {}};
    const auto choice =
        training::choose_memory_format(layout_config(""), torch::kCPU, false, rates.measure());
    EXPECT_TRUE(choice.timed);
    EXPECT_EQ(choice.format, expected);
    EXPECT_EQ(choice.contiguous_rate, contiguous);
    EXPECT_EQ(choice.channels_last_rate, channels_last);
    EXPECT_EQ(rates.asked, (std::vector<c10::MemoryFormat>{c10::MemoryFormat::Contiguous,
                                                           c10::MemoryFormat::ChannelsLast}));
    EXPECT_NE(choice.reason.find("auto: timed here over 3 steps of 8 images"), std::string::npos)
        << choice.reason;
  }
}

// Nothing is timed for an explicit layout, on CUDA (channels_last), with data-parallel training,
// or with bf16 where it is emulated.
TEST(MemoryFormat, WhatIsNotTimed) {
  FakeRates rates{1.0, 2.0, {}};
  auto choice = training::choose_memory_format(layout_config(", memory_format: contiguous"),
                                               torch::kCPU, false, rates.measure());
  EXPECT_FALSE(choice.timed);
  EXPECT_EQ(choice.format, c10::MemoryFormat::Contiguous);
  choice = training::choose_memory_format(layout_config(""), torch::Device(torch::kCUDA, 0), false,
                                          rates.measure());
  EXPECT_FALSE(choice.timed);
  EXPECT_EQ(choice.format, c10::MemoryFormat::ChannelsLast);
  choice = training::choose_memory_format(layout_config(""), torch::kCPU, true, rates.measure());
  EXPECT_FALSE(choice.timed);
  EXPECT_EQ(choice.format, c10::MemoryFormat::Contiguous);
  choice = training::choose_memory_format(layout_config(", precision: bf16"), torch::kCPU, false,
                                          rates.measure());
  EXPECT_EQ(choice.timed, training::cpu_has_native_bf16());
  if (!choice.timed) {
    EXPECT_EQ(rates.asked.size(), 0u);
  }
  // What components build from a config that still says auto: the untimed default.
  EXPECT_EQ(training::memory_format_for(layout_config(""), torch::kCPU),
            c10::MemoryFormat::Contiguous);
  EXPECT_EQ(training::memory_format_for(layout_config(""), torch::Device(torch::kCUDA, 0)),
            c10::MemoryFormat::ChannelsLast);
}

// bf16 contiguous is the combination known to be far slower on a CPU with native bf16.
TEST(MemoryFormat, Bf16ContiguousOnANativeBf16CpuIsWarnedAbout) {
  const auto warning = training::memory_format_warning(
      layout_config(", precision: bf16, memory_format: contiguous"), torch::kCPU);
  EXPECT_EQ(warning.empty(), !training::cpu_has_native_bf16()) << warning;
  EXPECT_TRUE(training::memory_format_warning(
                  layout_config(", precision: bf16, memory_format: channels_last"), torch::kCPU)
                  .empty());
  EXPECT_TRUE(
      training::memory_format_warning(layout_config(", memory_format: contiguous"), torch::kCPU)
          .empty());
}

// The default timing really trains: a positive rate for each layout.
TEST(MemoryFormat, TheDefaultTimingMeasuresTrainingSteps) {
  auto config = layout_config(", memory_format: channels_last, batch_size: 8");
  EXPECT_GT(training::measure_training_rate(config, torch::kCPU), 0.0);
}

// Round 5: a recorded layout holds only for the step it was timed for (another batch, precision,
// micro-batch count, model or optimizer is timed again), as a recorded checkpointing choice does.
TEST(MemoryFormat, ARecordedLayoutHoldsOnlyForTheStepItWasTimedFor) {
  FakeRates rates{10.0, 25.0, {}};
  const auto config = layout_config(", batch_size: 8, accumulate_steps: 1");
  training::Decisions decisions;
  training::decide_memory_format(config, decisions, torch::kCPU, false, rates.measure());
  ASSERT_TRUE(decisions.layout);
  EXPECT_EQ(decisions.layout->chosen_for, training::layout_signature(config, torch::kCPU));
  EXPECT_EQ(rates.asked.size(), 2u);
  // The same step: kept, not timed.
  auto kept = decisions;
  EXPECT_EQ(
      training::decide_memory_format(config, kept, torch::kCPU, false, rates.measure()).lapsed, "");
  EXPECT_EQ(rates.asked.size(), 2u);
  // Read back from decisions.json, still kept.
  auto back = training::parse_decisions(training::decisions_json(decisions), "decisions.json");
  training::decide_memory_format(config, back, torch::kCPU, false, rates.measure());
  EXPECT_EQ(rates.asked.size(), 2u);
  for (const std::string changed :
       {", batch_size: 4, accumulate_steps: 1", ", batch_size: 8, accumulate_steps: 2",
        ", batch_size: 8, accumulate_steps: 1, precision: fp16"}) {
    auto again = decisions;
    const auto before = rates.asked.size();
    const auto choice = training::decide_memory_format(layout_config(changed), again, torch::kCPU,
                                                       false, rates.measure());
    EXPECT_EQ(rates.asked.size(), before + 2) << changed << ": the recorded layout was kept";
    // Said why, as a lapsed checkpointing choice is (the fourteenth pass: timed again in silence).
    EXPECT_EQ(
        choice.lapsed.rfind("the recorded layout does not hold (it was chosen for resnet18 ", 0),
        0u)
        << choice.lapsed;
    EXPECT_NE(choice.lapsed.find(", and this run is resnet18 "), std::string::npos);
  }
  // What the timing step leaves as it was is the same step (the thirteenth pass: timed again,
  // over-strict): without a budget it times at most 8 images without the weight average, and two
  // micro-batches for any accumulation.
  const auto in_two = layout_config(", batch_size: 8, accumulate_steps: 2");
  training::Decisions two;
  training::decide_memory_format(in_two, two, torch::kCPU, false, rates.measure());
  for (const std::string same : {", batch_size: 16, accumulate_steps: 1",
                                 ", batch_size: 8, accumulate_steps: 1, "
                                 "ema_decay: 0.99"}) {
    auto again = decisions;
    const auto before = rates.asked.size();
    training::decide_memory_format(layout_config(same), again, torch::kCPU, false, rates.measure());
    EXPECT_EQ(rates.asked.size(), before) << same << ": timed again";
  }
  auto four = two;
  const auto before_four = rates.asked.size();
  training::decide_memory_format(layout_config(", batch_size: 8, accumulate_steps: 4"), four,
                                 torch::kCPU, false, rates.measure());
  EXPECT_EQ(rates.asked.size(), before_four) << "4 micro-batches: timed again";
  // The recomputation the timing step ran (the tenth pass's F1: a layout timed with every block
  // recomputed was kept for a resume without checkpointing, which then ran out of memory).
  const std::vector<std::string> one_block = {"layer1.0"}, none = {};
  for (const auto& checkpointing :
       {training::CheckpointingOptions().mode(training::CheckpointMode::On),
        training::CheckpointingOptions()
            .mode(training::CheckpointMode::On)
            .granularity(training::CheckpointGranularity::Stage),
        training::CheckpointingOptions().mode(training::CheckpointMode::Auto).blocks(one_block),
        training::CheckpointingOptions().mode(training::CheckpointMode::Auto).blocks(none)}) {
    auto changed = config;
    changed.checkpointing = checkpointing;
    auto again = decisions;
    const auto before = rates.asked.size();
    training::decide_memory_format(changed, again, torch::kCPU, false, rates.measure());
    EXPECT_EQ(rates.asked.size(), before + 2) << training::layout_signature(changed, torch::kCPU);
  }
  auto resized = config;  // data.image_size: another step
  resized.data.image_size = 64;
  EXPECT_NE(training::step_signature(resized, std::nullopt, torch::kCPU).find("batch 8 at 64x64"),
            std::string::npos);
  auto again = decisions;
  const auto before = rates.asked.size();
  training::decide_memory_format(resized, again, torch::kCPU, false, rates.measure());
  EXPECT_EQ(rates.asked.size(), before + 2) << "the layout timed at 32x32 was kept at 64x64";
  // An older run's decision names no step: timed again.
  auto older = decisions;
  older.layout->chosen_for.clear();
  training::decide_memory_format(config, older, torch::kCPU, false, rates.measure());
  EXPECT_EQ(older.layout->chosen_for, training::layout_signature(config, torch::kCPU));
}

// The thirteenth review: a layout timed on one CPU was kept on another with as many threads (a
// bf16 layout left untimed where bf16 is emulated, kept on a CPU with AMX). The CPU's model and
// kernels are in what it holds for: oneDNN limited to other kernels is another CPU.
TEST(MemoryFormat, ARecordedLayoutHoldsOnlyOnTheCpuItWasTimedOn) {
  const torch::Device cpu(torch::kCPU);
  const std::string here = training::device_identity(cpu);
  EXPECT_EQ(here.rfind("cpu (", 0), 0u) << here;
  EXPECT_NE(here.find(at::get_cpu_capability()), std::string::npos) << here;
  FakeRates rates{10.0, 25.0, {}};
  const auto config = layout_config(", batch_size: 8");
  training::Decisions decisions;
  training::decide_memory_format(config, decisions, cpu, false, rates.measure());
  ASSERT_EQ(rates.asked.size(), 2u);
  EXPECT_NE(decisions.layout->chosen_for.find(", on " + here), std::string::npos)
      << decisions.layout->chosen_for;
  const char* before = std::getenv("ONEDNN_MAX_CPU_ISA");
  const std::string kept_value = before ? before : "";
  const std::string other = kept_value == "SSE41" ? "AVX2" : "SSE41";  // (the .avx2 run sets AVX2)
  setenv("ONEDNN_MAX_CPU_ISA", other.c_str(), 1);
  const std::string limited = training::device_identity(cpu);
  auto again = decisions;
  training::decide_memory_format(config, again, cpu, false, rates.measure());
  if (before) {
    setenv("ONEDNN_MAX_CPU_ISA", kept_value.c_str(), 1);
  } else {
    unsetenv("ONEDNN_MAX_CPU_ISA");
  }
  EXPECT_NE(limited, here);
  EXPECT_NE(limited.find("ONEDNN_MAX_CPU_ISA=" + other), std::string::npos) << limited;
  EXPECT_EQ(rates.asked.size(), 4u) << "the layout timed on " << here << " was kept on " << limited;
}

// Eighth hostile pass: under memory.limit the layouts were timed on 8 images, so a layout whose
// step fits at 8 and not at the run's batch (16) was chosen, and the run ran out of memory in
// its first step where the other layout trains; a recorded layout was kept under a new limit,
// and with other CPU threads than it was timed with.
TEST(MemoryFormat, UnderAMemoryLimitTheLayoutIsTimedAtTheRunsBatchAndHoldsForThatLimitAlone) {
  std::vector<std::pair<int64_t, double>> timed;  // batch, weight average
  const training::MeasureRate measure = [&](const training::Config& c, const torch::Device&) {
    timed.emplace_back(c.training.batch_size, c.training.ema_decay);
    return 10.0;
  };
  auto run = [&](const training::Config& config) {
    timed.clear();
    training::choose_memory_format(config, torch::kCPU, false, measure);
    return timed;
  };
  const auto free = layout_config(", batch_size: 16, ema_decay: 0.99");
  EXPECT_EQ(run(free), (std::vector<std::pair<int64_t, double>>{{8, 0.0}, {8, 0.0}}));
  auto limited = free;
  limited.memory.limit = 196LL << 20;
  EXPECT_EQ(run(limited), (std::vector<std::pair<int64_t, double>>{{16, 0.99}, {16, 0.99}}));
  const auto choice = training::choose_memory_format(limited, torch::kCPU, false, measure);
  EXPECT_NE(choice.reason.find("over 3 steps of 16 images"), std::string::npos) << choice.reason;
  // The same step under another limit, or on other threads: timed again.
  FakeRates rates{10.0, 25.0, {}};
  training::Decisions decisions;
  training::decide_memory_format(limited, decisions, torch::kCPU, false, rates.measure());
  ASSERT_EQ(rates.asked.size(), 2u);
  auto kept = decisions;
  training::decide_memory_format(limited, kept, torch::kCPU, false, rates.measure());
  EXPECT_EQ(rates.asked.size(), 2u);
  auto other_limit = limited;
  other_limit.memory.limit = 200LL << 20;
  auto again = decisions;
  training::decide_memory_format(other_limit, again, torch::kCPU, false, rates.measure());
  EXPECT_EQ(rates.asked.size(), 4u) << "the layout timed under 196 MiB was kept under 200 MiB";
  const int threads = at::get_num_threads();
  at::set_num_threads(threads + 1);
  again = decisions;
  training::decide_memory_format(limited, again, torch::kCPU, false, rates.measure());
  at::set_num_threads(threads);
  EXPECT_EQ(rates.asked.size(), 6u) << "the layout timed on " << threads << " threads was kept";
  // Under a limit the run's batch is the batch timed: another batch is another step.
  auto larger = limited;
  larger.training.batch_size = 32;
  again = decisions;
  training::decide_memory_format(larger, again, torch::kCPU, false, rates.measure());
  EXPECT_EQ(rates.asked.size(), 8u) << "the layout timed at batch 16 under a limit was kept at 32";
}

// Hostile pass: a layout whose timing step ran out of memory under memory.limit ended the run
// (exit 3, "the model, its optimizer state must fit before the first step") where the other
// layout trains. It is no candidate: the other is timed and chosen, and the reason says why.
// Only when the step runs out of memory in both layouts does the error go on (the command words
// it).
TEST(MemoryFormat, ALayoutWhoseTimingStepRunsOutOfMemoryIsNotACandidate) {
  for (const auto failing : {c10::MemoryFormat::ChannelsLast, c10::MemoryFormat::Contiguous}) {
    const auto other = failing == c10::MemoryFormat::ChannelsLast ? c10::MemoryFormat::Contiguous
                                                                  : c10::MemoryFormat::ChannelsLast;
    std::vector<c10::MemoryFormat> asked;
    const training::MeasureRate measure = [&](const training::Config& c, const torch::Device&) {
      asked.push_back(*c.training.memory_format);
      TORCH_CHECK_WITH(OutOfMemoryError, *c.training.memory_format != failing,
                       "CPU out of memory: Tried to allocate 2.00 MiB (memory limit)");
      return 12.5;
    };
    training::Decisions decisions;
    const auto choice =
        training::decide_memory_format(layout_config(""), decisions, torch::kCPU, false, measure);
    EXPECT_EQ(asked.size(), 2u);
    EXPECT_EQ(choice.format, other);
    const std::string why =
        training::memory_format_name(failing) + " ran out of memory in its timing step (";
    EXPECT_NE(choice.reason.find(why), std::string::npos) << choice.reason;
    EXPECT_NE(choice.reason.find(training::memory_format_name(other) + " timed at 12.5 images/s"),
              std::string::npos)
        << choice.reason;
    ASSERT_TRUE(decisions.layout);  // decisions.json's reason says it too
    EXPECT_EQ(decisions.layout->format, other);
    EXPECT_NE(decisions.layout->reason.find(why), std::string::npos) << decisions.layout->reason;
  }
  const training::MeasureRate neither = [](const training::Config&, const torch::Device&) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: Tried to allocate 2.00 MiB");
    return 1.0;
  };
  try {
    training::choose_memory_format(layout_config(""), torch::kCPU, false, neither);
    ADD_FAILURE() << "a step that fits in neither layout was not refused";
  } catch (const std::exception& e) {
    EXPECT_TRUE(training::is_out_of_memory(e)) << e.what();
  }
}

// Hostile pass: with checkpointing.enabled: auto the layouts were timed in the plain step under
// memory.limit, the very step auto exists to avoid: a limit the plain step exceeds and auto
// meets by recomputing blocks was exit 3 in the timing. The timing step is auto's least memory,
// every block recomputed (the step its measurement takes). The limit sits between the two
// steps' peaks, measured here.
TEST(MemoryFormat, AutoCheckpointingIsTimedWithEveryBlockRecomputedNotThePlainStep) {
  auto& allocator = training::TrackingCpuAllocator::instance();
  struct NoLimitAfter {
    ~NoLimitAfter() { training::TrackingCpuAllocator::instance().set_limit(0); }
  } no_limit_after;
  auto config = training::parse_config(
      "model: {arch: resnet18, stem: cifar}\ntraining: {device: cpu, batch_size: 8, "
      "memory_format: contiguous}\n",
      "layout");
  auto peak_of = [&](const training::Config& c) {
    allocator.reset_peak();
    training::measure_training_rate(c, torch::kCPU);
    return allocator.stats().peak_allocated;
  };
  const int64_t plain = peak_of(config);
  config.checkpointing.mode(training::CheckpointMode::On)
      .granularity(training::CheckpointGranularity::Block);
  const int64_t recomputed = peak_of(config);
  ASSERT_LT(recomputed, plain);
  config.checkpointing.mode(training::CheckpointMode::Auto);
  allocator.set_limit((plain + recomputed) / 2);
  try {
    EXPECT_GT(training::measure_training_rate(config, torch::kCPU), 0.0);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "timed the plain step: " << e.what();
  }
}

// Issue 51, a ninth pass: under memory.limit the layouts were timed in a bare micro-batch, without
// what the run holds beside its step (data.prefetch's batches) nor, with training.accumulate_steps
// > 1, the gradients and BatchNorm copy held from the step's first micro-batch: channels_last
// won the timing and the run was exit 3 where contiguous trains. The timing step is the run's (a
// micro-batch after one, as checkpointing auto's measurement), with the bytes beside it held while
// each layout is timed, and its chosen_for names both (the limit in bytes: 4 KiB apart is another).
TEST(MemoryFormat, UnderALimitTheTimingStepIsTheRunsWithWhatItHoldsBesideIt) {
  auto& allocator = training::TrackingCpuAllocator::instance();
  auto peak_of = [&](const training::Config& c) {
    allocator.reset_peak();
    const int64_t before = allocator.stats().allocated;
    training::measure_training_rate(c, torch::kCPU);
    return allocator.stats().peak_allocated - before;
  };
  auto config = training::parse_config(
      "model: {arch: resnet18, stem: cifar}\ntraining: {device: cpu, batch_size: 4, "
      "memory_format: contiguous}\n",
      "layout");
  const int64_t one = peak_of(config);
  config.training.accumulate_steps = 3;
  EXPECT_GT(peak_of(config), one) << "an accumulating step was timed as a bare micro-batch";
  auto limited = layout_config(", batch_size: 4");
  limited.memory.limit = 300LL << 20;
  std::vector<int64_t> held;
  const training::MeasureRate measure = [&](const training::Config&, const torch::Device&) {
    held.push_back(allocator.stats().allocated);
    return 10.0;
  };
  const int64_t beside = 5LL << 20, before = allocator.stats().allocated;
  training::Decisions decisions;
  training::decide_memory_format(limited, decisions, torch::kCPU, false, measure, beside);
  ASSERT_EQ(held.size(), 2u);
  for (const int64_t bytes : held) EXPECT_GE(bytes - before, beside);
  EXPECT_NE(decisions.layout->chosen_for.find("314572800 bytes"), std::string::npos)
      << decisions.layout->chosen_for;
  auto kept = decisions;
  training::decide_memory_format(limited, kept, torch::kCPU, false, measure, beside);
  EXPECT_EQ(held.size(), 2u) << "the same step, limit and bytes beside: kept";
  training::decide_memory_format(limited, kept, torch::kCPU, false, measure, 2 * beside);
  EXPECT_EQ(held.size(), 4u) << "timed with 5 MiB beside the step, kept with 10 MiB";
  limited.memory.limit += 4096;
  kept = decisions;
  training::decide_memory_format(limited, kept, torch::kCPU, false, measure, beside);
  EXPECT_EQ(held.size(), 6u) << "timed under 300 MiB, kept 4 KiB above";
  // With checkpointing auto, the budget its blocks are chosen for (here checkpointing.budget, no
  // memory.limit): each layout timed at the run's batch with the budget as the allocator's limit;
  // the contiguous layout chosen by speed at 8 images had been "nothing fits" where channels_last
  // fits.
  const auto budgeted = training::parse_config(
      "model: {arch: resnet18, stem: imagenet}\ntraining: {device: cpu, batch_size: 16}\n"
      "checkpointing: {enabled: auto, budget: 173MiB}\n",
      "layout");
  std::vector<std::pair<int64_t, int64_t>> timed;  // batch, the allocator's limit
  const training::MeasureRate under = [&](const training::Config& c, const torch::Device&) {
    timed.emplace_back(c.training.batch_size, allocator.limit());
    return 10.0;
  };
  training::choose_memory_format(budgeted, torch::kCPU, false, under);
  EXPECT_EQ(timed,
            (std::vector<std::pair<int64_t, int64_t>>{{16, 173LL << 20}, {16, 173LL << 20}}));
  EXPECT_EQ(allocator.limit(), 0);
  EXPECT_NE(
      training::layout_signature(budgeted, torch::kCPU).find("its step within 181403648 bytes"),
      std::string::npos);
  // Neither layout's step within auto's budget: the default layout, and auto's own "nothing fits"
  // says what would (the same with memory.limit alone is the step's exit 3: rethrown).
  const training::MeasureRate neither = [](const training::Config&,
                                           const torch::Device&) -> double {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: Tried to allocate 2.00 MiB");
  };
  const auto contiguous = training::choose_memory_format(budgeted, torch::kCPU, false, neither);
  EXPECT_EQ(contiguous.format, c10::MemoryFormat::Contiguous);
  EXPECT_EQ(contiguous.reason.rfind(
                "auto: neither layout's step fits checkpointing's budget 173.00 MiB", 0),
            0u)
      << contiguous.reason;
  EXPECT_THROW(training::choose_memory_format(limited, torch::kCPU, false, neither),
               c10::OutOfMemoryError);
}

}  // namespace
