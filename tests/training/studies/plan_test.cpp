// `train plan` on prepared sweeps: sweep.json files written by the sweep's own writer, with peaks
// on exact lines, so what fits and what is fastest is known in advance.
#include "training/studies/plan.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <tuple>

#include "data/loader.h"
#include "test_support.h"
#include "training/config/config_yaml.h"
#include "training/parts/components.h"
#include "training/platform/errors.h"
#include "training/run/output_dir.h"
#include "training/studies/sweep.h"
#include "training/studies/sweep_report.h"

namespace {

namespace fs = std::filesystem;
using training::Precision;
using training::Setting;

constexpr int64_t MiB = training::kMiB;
constexpr int64_t kGiB = 1024 * MiB;  // the overhead the arithmetic below plans with

const Setting plain{Precision::FP32, training::CheckpointMode::Off, c10::MemoryFormat::Contiguous};
const Setting automatic{Precision::FP32, training::CheckpointMode::Auto,
                        c10::MemoryFormat::Contiguous};
const Setting checkpointed{Precision::FP32, training::CheckpointMode::On,
                           c10::MemoryFormat::Contiguous};

training::SweepTrial trial(int64_t id, Setting cell, int64_t batch, int64_t peak,
                           double images_per_second, training::TrialStatus status = {}) {
  training::SweepTrial t;
  t.id = id;
  t.setting = cell;
  t.batch = batch;
  t.source = "grid";
  t.result.status = status;
  t.result.peak_allocated_bytes = t.result.peak_reserved_bytes = peak;
  if (status == training::TrialStatus::Ok) {  // figures of the measured steps: null otherwise
    t.result.steady_peak_allocated_bytes = t.result.steady_peak_reserved_bytes = peak;
    t.result.images_per_second = images_per_second;
    t.result.median_step_seconds = static_cast<double>(batch) / images_per_second;
  }
  t.result.steps = 3;
  return t;
}

// The plan's JSON candidates, by value: a range-for over `plan_json(plan).at("candidates")` walks
// a temporary already destroyed (its assertions never ran).
nlohmann::ordered_json candidates_of(const training::Plan& plan) {
  return training::plan_json(plan).at("candidates");
}

// A sweep's folder as `train sweep` leaves it: its marker says so.
fs::path sweep_folder(const fs::path& sweep) {
  if (!training::held_outputs(sweep).kind) {
    { auto lock = training::claim_output_dir(sweep, training::OutputKind::Sweep, "--output-dir"); }
    training::mark_finished(sweep, training::OutputKind::Sweep);
  }
  return sweep;
}

// Without checkpointing: 200 MiB + 25 MiB per sample, 100/150/180 images/s at 32/64/128.
// With: 300 MiB + 9.375 MiB per sample, 110/130/140 images/s at 64/128/256.
fs::path prepared_sweep(const test_support::TempDir& dir, const std::string& device = "cpu",
                        const std::string& arch = "resnet50") {
  const auto ok = training::TrialStatus::Ok;
  std::vector<training::SweepTrial> trials = {
      trial(1, plain, 32, 1000 * MiB, 100, ok),
      trial(2, plain, 64, 1800 * MiB, 150, ok),
      trial(3, plain, 128, 3400 * MiB, 180, ok),
      trial(4, checkpointed, 64, 900 * MiB, 110, ok),
      trial(5, checkpointed, 128, 1500 * MiB, 130, ok),
      trial(6, checkpointed, 256, 2700 * MiB, 140, ok),
      trial(7, plain, 512, 0, 0, training::TrialStatus::OutOfMemory)};
  const std::vector<Setting> cells = {plain, checkpointed};
  training::SweepFacts facts{arch, "cifar", device, device, 64LL << 30, false, 1, 2, {}};
  const fs::path sweep = sweep_folder(dir / "sweep");
  training::write_sweep_tables(sweep, facts, training::summarize(cells, trials, {}, false), trials,
                               true);
  // The sweep's config, as `train sweep` writes it (checkpointing.granularity: block).
  std::ofstream(sweep / "config.yaml") << training::to_yaml(training::parse_config("", "test"));
  return sweep;
}

// The sweep's config.yaml says how a checkpointed setting is recommended and which batch trains
// the model: one that cannot be read is said (naming the file), never planned around in silence.
TEST(Plan, ASweepsConfigThatCannotBeReadIsSaid) {
  test_support::TempDir dir;
  const auto sweep = prepared_sweep(dir);
  std::ofstream(sweep / "config.yaml") << "training: {batch_size: [}\n";
  try {
    training::make_plan(sweep, 4LL << 30, 0.10, kGiB);
    ADD_FAILURE() << "a broken config.yaml was planned around";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find((sweep / "config.yaml").string()), std::string::npos)
        << e.what();
  }
}

// The config beside a sweep is the one it ran: one edited since (round 5: data.image_size 64
// made 16, a largest batch of 98176 where the sweep's step gave 7008) is refused naming both
// files, for each fact sweep.json records of the step (model, stem, image size).
TEST(Plan, ASweepsConfigEditedSinceItRanIsRefused) {
  test_support::TempDir dir;
  const auto sweep = prepared_sweep(dir);  // resnet50, CIFAR stem, 32x32
  training::Config config = training::parse_config("", "test");
  for (const auto& [key, edit] :
       std::vector<std::pair<std::string, std::function<void(training::Config&)>>>{
           {"data.image_size is 16, but the sweep measured 32",
            [](training::Config& c) { c.data.image_size = 16; }},
           {"model.arch is resnet18, but the sweep measured resnet50",
            [](training::Config& c) { c.model = models::ResNetOptions(18); }}}) {
    training::Config edited = config;
    edit(edited);
    std::ofstream(sweep / "config.yaml") << training::to_yaml(edited);
    try {
      training::make_plan(sweep, 64LL << 30, 0.10, kGiB);
      ADD_FAILURE() << key << ": planned from an edited config";
    } catch (const training::UserError& e) {
      EXPECT_EQ(std::string(e.what()), (sweep / "config.yaml").string() + ": " + key + " (" +
                                           (sweep / "sweep.json").string() +
                                           "); the config beside a sweep is the one it ran: "
                                           "restore it, or sweep again");
    }
  }
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  EXPECT_TRUE(training::make_plan(sweep, 64LL << 30, 0.10, kGiB).chosen);
}

TEST(Plan, PicksTheFastestSettingThatFits) {
  test_support::TempDir dir;
  // 4 GiB less 10% is 3.6 GiB; less 1 GiB outside the allocator (--overhead), 2.6 GiB for the
  // peak: batch 128 without checkpointing (3400 MiB) and 256 with (2700 MiB) do not fit.
  const auto plan = training::make_plan(prepared_sweep(dir), 4LL << 30, 0.10, kGiB);
  EXPECT_EQ(plan.overhead_bytes, kGiB);
  ASSERT_TRUE(plan.chosen);
  const auto& best = plan.candidates.at(*plan.chosen);
  EXPECT_EQ(best.setting, plain);
  EXPECT_EQ(best.batch, 64);
  EXPECT_EQ(best.predicted_peak, 1800 * MiB);
  EXPECT_EQ(plan.candidates.size(), 6u);  // the out-of-memory trial is no candidate
  EXPECT_FALSE(plan.candidates[0].fits);  // 180 images/s, but 3400 MiB
  EXPECT_EQ(training::recommended_flags(plan, best),
            "--set training.batch_size=64 --set training.precision=fp32 --set "
            "training.memory_format=contiguous --set checkpointing.enabled=off");
  // A setting measured with checkpointing is recommended as auto with the plan's budget for the
  // allocator (3.6 GiB less 1 GiB): it recomputes only what that budget needs.
  training::PlanCandidate recomputing = best;
  recomputing.setting = checkpointed;
  EXPECT_TRUE(plan.per_block_checkpointing);  // the sweep's config: granularity block
  EXPECT_EQ(training::recommended_flags(plan, recomputing),
            "--set training.batch_size=64 --set training.precision=fp32 --set "
            "training.memory_format=contiguous --set checkpointing.enabled=auto --set "
            "checkpointing.budget=" +
                training::byte_size_text(plan.usable_bytes - plan.overhead_bytes));
  training::Plan by_stage = plan;  // a sweep that recomputed stages: recommended as measured
  by_stage.per_block_checkpointing = false;
  EXPECT_NE(training::recommended_flags(by_stage, recomputing).find("checkpointing.enabled=on"),
            std::string::npos);
  const std::string table = training::plan_table(plan);
  EXPECT_NE(table.find("| fp32 / checkpointing off / contiguous | 64 | 150 | 1.76 GiB | "
                       "**recommended** |"),
            std::string::npos)
      << table;
  // The card as given, a size `--memory` takes back to the same bytes (hostile pass 7: "1.00 GiB"
  // for a 1026MiB card, which typed back planned for 1024 MiB); without --target-batch, neither
  // a target nor its gradients.
  EXPECT_NE(table.find("Plan for a 4GiB (4.00 GiB) card"), std::string::npos) << table;
  training::Plan odd = training::make_plan(prepared_sweep(dir), 1026 * MiB * 4, 0.10, kGiB);
  EXPECT_EQ(training::plan_json(odd).at("card"), "4104MiB");
  EXPECT_TRUE(training::plan_json(plan).at("target_batch").is_null());
  EXPECT_TRUE(training::plan_json(plan).at("accumulated_gradient_bytes").is_null());
  EXPECT_NE(table.find("| 128 | 180 | 3.32 GiB | does not fit: needs a card of at least 4916MiB |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 256 | 140 | 2.64 GiB | does not fit"), std::string::npos) << table;
  EXPECT_NE(table.find("| 128 | 130 | 1.46 GiB | slower: 13% fewer images/s |"), std::string::npos)
      << table;
  // The sweep's fit predicts the largest batch per setting: (2.6 GiB - 200 MiB) / 25 MiB.
  EXPECT_NE(table.find("| fp32 / checkpointing off / contiguous | 98 |"), std::string::npos)
      << table;
  training::Plan tied = plan;  // as fast as the recommended one: no "slower: 0% fewer"
  for (auto& c : tied.candidates) {
    if (c.fits) c.images_per_second = best.images_per_second;
  }
  const std::string ties = training::plan_table(tied);
  EXPECT_EQ(ties.find("slower"), std::string::npos) << ties;
  EXPECT_NE(ties.find("| 128 | 150 | 1.46 GiB | as fast (within 0.5%; the recommended one is "
                      "listed first) |"),
            std::string::npos)
      << ties;
}

// A bigger card, or a smaller overhead, lets the faster settings in.
TEST(Plan, ABiggerCardPicksAFasterSetting) {
  test_support::TempDir dir;
  const auto sweep = prepared_sweep(dir);
  const auto plan = training::make_plan(sweep, 6LL << 30, 0.10, kGiB);
  EXPECT_EQ(plan.candidates.at(*plan.chosen).batch, 128);
  EXPECT_EQ(plan.candidates.at(*plan.chosen).setting, plain);
  const auto tight = training::make_plan(sweep, 4LL << 30, 0.10, 256 * MiB);
  EXPECT_EQ(tight.candidates.at(*tight.chosen).batch, 128);  // 3400 MiB + 256 MiB <= 3.6 GiB
}

// Round 5: `plan --card H100-SXM --overhead 80GiB` replayed every setting on the card (four
// recordings, 12.6 s) before refusing what arithmetic knew: the card less its headroom leaves the
// allocator nothing. Refused first, naming the card as given.
TEST(Plan, ACardThatLeavesTheAllocatorNothingIsRefusedBeforeAnyReplay) {
  test_support::TempDir dir;
  const training::Card h100 = training::find_card("H100-SXM");
  try {
    training::make_plan(prepared_sweep(dir), h100.memory_bytes, 0.10, 80 * kGiB, h100);
    FAIL() << "a plan was made with nothing left for the allocator";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--card: nothing fits in H100-SXM (79.65 GiB) with 10% headroom and 80.00 GiB "
              "outside the allocator: that leaves the allocator no memory");
  }
}

TEST(Plan, RefusesACardTooSmallNamingTheSmallestThatFits) {
  test_support::TempDir dir;
  try {
    training::make_plan(prepared_sweep(dir), 2LL << 30, 0.10, kGiB);
    FAIL() << "a 2 GiB card was given a plan";
  } catch (const training::UserError& e) {
    // The smallest peak, 900 MiB with checkpointing at 64, + 1 GiB, / 0.9 = 2.09 GiB.
    EXPECT_EQ(std::string(e.what()),
              "--memory: no measured setting fits in 2GiB (2.00 GiB) with 10% headroom and 1.00 "
              "GiB outside the allocator; the smallest, fp32 / checkpointing on / contiguous at "
              "batch 64, needs a card of at least 2138MiB");
  }
  // Round 5: at the edge both sides read "1.11 GiB" and the advised "1.11GiB" was refused. The
  // size advised is one the flag takes, and the plan is made on it; 1 MiB less is refused with
  // the two sizes told apart.
  const int64_t advised = training::parse_byte_size("2138MiB");
  EXPECT_TRUE(training::make_plan(prepared_sweep(dir), advised, 0.10, kGiB).chosen);
  try {
    training::make_plan(prepared_sweep(dir), advised - MiB, 0.10, kGiB);
    FAIL() << "a card 1 MiB below the advised size was given a plan";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("fits in 2137MiB (2.09 GiB)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("at least 2138MiB"), std::string::npos) << e.what();
  }
}

// On CUDA the sweep's trials measured the memory outside the allocator: that is used. A CPU sweep
// plans with the figure the card prediction assumes too (cards.h), one figure for one fact.
TEST(Plan, UsesTheOverheadACudaSweepMeasured) {
  test_support::TempDir dir;
  const test_support::TempDir cpu_dir;
  const auto on_cpu = training::make_plan(prepared_sweep(cpu_dir), 4LL << 30, 0.10, std::nullopt);
  EXPECT_EQ(on_cpu.overhead_bytes, training::kOutsideAllocatorBytes);
  EXPECT_EQ(on_cpu.overhead_bytes, training::beside_tensors({}).outside_allocator);
  EXPECT_NE(on_cpu.overhead_source.find("measured on an H200"), std::string::npos);
  const auto sweep = prepared_sweep(dir, "cuda:0");
  auto json = nlohmann::json::parse(test_support::read_text(sweep / "sweep.json"));
  for (auto& row : json.at("trials")) row["outside_allocator_bytes"] = 600 * MiB;
  std::ofstream(sweep / "sweep.json") << json.dump();
  const auto plan = training::make_plan(sweep, 4LL << 30, 0.10, std::nullopt);
  EXPECT_EQ(plan.overhead_bytes, 600 * MiB);
  EXPECT_NE(plan.overhead_source.find("measured on cuda:0"), std::string::npos);
}

TEST(Plan, RefusesBadInput) {
  test_support::TempDir dir;
  fs::create_directories(dir / "empty");
  std::ofstream(dir / "empty/sweep.json") << "{\"arch\": 1}";
  try {  // a sweep.json alone is no sweep: only the marker says what a folder holds
    training::make_plan(dir / "empty", 4LL << 30, 0.1, std::nullopt);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "empty").string() +
                                         ": not a sweep written by train (no .train-output "
                                         "marker in it)");
  }
  { auto lock = training::claim_output_dir(dir / "run", training::OutputKind::Run, "-o"); }
  try {  // the marker is read before the files: a run is no sweep
    training::make_plan(dir / "run", 4LL << 30, 0.1, std::nullopt);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "run").string() + ": holds a run, not a sweep");
  }
  { auto lock = training::claim_output_dir(dir / "sweep", training::OutputKind::Sweep, "-o"); }
  try {
    training::make_plan(dir / "sweep", 4LL << 30, 0.1, std::nullopt);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no sweep (no sweep.json)"), std::string::npos);
  }
  std::ofstream(dir / "sweep/sweep.json") << "{\"arch\": 1}";
  try {
    training::make_plan(dir / "sweep", 4LL << 30, 0.1, std::nullopt);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not a sweep written by `train sweep`"),
              std::string::npos);
  }
}

// data.device_resident's splits are counted for a card (they are held on it): a root without the
// data is the data's own error before the plan's small sweep or a sweep measures anything.
TEST(Plan, ACardsResidentDataMissingIsRefusedBeforeAnySweep) {
  test_support::TempDir dir;
  std::ofstream(dir / "c.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                   "data: {device_resident: true, root: " +
                                       (dir / "none").string() +
                                       "}\ntraining: {device: cpu, batch_size: 8}\n"
                                       "sweep: {batch_sizes: [8]}\n";
  training::PlanRequest plan;
  plan.config_path = (dir / "c.yaml").string();
  plan.card = training::find_card("T4");
  plan.memory = plan.card->memory_bytes;
  plan.output_dir = (dir / "planned").string();
  EXPECT_THROW(training::plan_command(plan), data::DataError);
  EXPECT_FALSE(fs::exists(dir / "planned"));
  training::SweepRequest sweep;
  sweep.config_path = plan.config_path;
  sweep.card = "T4";
  sweep.output_dir = (dir / "swept").string();
  EXPECT_THROW(training::run_sweep(sweep), data::DataError);
  EXPECT_FALSE(fs::exists(dir / "swept"));
}

// `train plan --config` of a ResNet-18 (CIFAR stem) on the CPU, its small sweep of `sweep` into
// dir/planned.
training::PlanRequest small_sweep_plan(const test_support::TempDir& dir, const std::string& data,
                                       const std::string& sweep) {
  std::ofstream(dir / "c.yaml") << "model: {arch: resnet18, stem: cifar}\ndata: " << data
                                << "\ntraining: {device: cpu}\nsweep: " << sweep << "\n";
  training::PlanRequest plan;
  plan.config_path = (dir / "c.yaml").string();
  plan.output_dir = (dir / "planned").string();
  return plan;
}

// A card whose headroom and what lies outside the allocator leave the allocator nothing is known
// before any measurement: refused before the small sweep (round 5: 9 s of sweep first), as with
// --from.
TEST(Plan, ACardThatLeavesTheAllocatorNothingIsRefusedBeforeTheSmallSweep) {
  test_support::TempDir dir;
  auto plan = small_sweep_plan(dir, "{source: synthetic}", "{batch_sizes: [4]}");
  plan.card = training::find_card("800MiB");  // less 10%: 720 MiB, below the 771 MiB outside
  plan.memory = plan.card->memory_bytes;
  try {
    training::plan_command(plan);
    ADD_FAILURE() << "a sweep ran for a card that leaves the allocator nothing";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--card: nothing fits in 800MiB (800.00 MiB) with 10% "
                                         "headroom and 771.00 MiB outside the allocator: that "
                                         "leaves the allocator no memory"),
              std::string::npos)
        << e.what();
  }
  plan.card = training::find_card("H100-SXM");
  plan.memory = plan.card->memory_bytes;
  plan.overhead = 80 * kGiB;
  EXPECT_THROW(training::plan_command(plan), training::UserError);
  EXPECT_FALSE(fs::exists(dir / "planned"));
  // Hostile pass 7: `--memory 500MiB` (or `--memory 2GiB --overhead 3GiB`) ran the small sweep
  // (16.7 s, its folder written) before the same refusal; the CPU's sweep measures nothing of what
  // lies outside the allocator, so the 771 MiB assumed is known first.
  for (const auto& [memory, overhead] :
       {std::pair<int64_t, std::optional<int64_t>>{500 * MiB, std::nullopt},
        std::pair<int64_t, std::optional<int64_t>>{2 * kGiB, 3 * kGiB}}) {
    plan.card.reset();
    plan.memory = memory;
    plan.overhead = overhead;
    try {
      training::plan_command(plan);
      ADD_FAILURE() << "a sweep ran for a --memory card that leaves the allocator nothing";
    } catch (const training::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("--memory: nothing fits in "), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("that leaves the allocator no memory"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "planned"));
  }
  // Issue 51, a ninth pass: 950 MiB less 10% and 771 MiB leaves 84 MiB, below ResNet-18's weights,
  // gradients and momentum (127.91 MiB): the sweep ran (16 s, its folder written) first.
  plan.memory = 950 * MiB;
  plan.overhead.reset();
  try {
    training::plan_command(plan);
    ADD_FAILURE() << "a sweep ran for a card whose allocator gets less than the weights";
  } catch (const training::UserError& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "--memory: nothing fits in 950MiB (950.00 MiB) with 10% headroom and 771.00 MiB "
            "outside the allocator: the weights and their gradients and momentum alone take "),
        std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "planned"));
}

// Without --from, a --target-batch that no batch of the small sweep's grid makes, or above the
// training images the config gives, was refused after the sweep (its folder written): refused
// first, naming the grid.
TEST(Plan, ATargetBatchTheSmallSweepCannotMakeIsRefusedBeforeIt) {
  test_support::TempDir dir;
  auto plan = small_sweep_plan(dir, "{source: synthetic, synthetic_train_size: 100}",
                               "{batch_sizes: [4, 8]}");
  plan.memory = 4 * kGiB;
  for (const auto& [target, says] :
       {std::pair<int64_t, std::string>{
            30,
            "--target-batch: 30 is not a multiple of any batch the small sweep will measure "
            "(4, 8)"},
        std::pair<int64_t, std::string>{128,
                                        "--target-batch: 128 images a step are more than "
                                        "the 100 training images"}}) {
    plan.target_batch = target;
    try {
      training::plan_command(plan);
      ADD_FAILURE() << "a sweep ran for --target-batch " << target;
    } catch (const training::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "planned"));
  }
}

// Hostile pass 8: what no setting of the small sweep's grid can do, known before it, was refused
// after it (its folder written): a grid of bf16 only on a T4 (compute capability 7.5), and one
// whose every batch is more than the config's training images (18 s to minutes of sweep first).
TEST(Plan, WhatNoSettingOfTheSmallSweepsGridCanDoIsRefusedBeforeIt) {
  test_support::TempDir dir;
  auto plan = small_sweep_plan(dir, "{source: synthetic, synthetic_train_size: 8}",
                               "{batch_sizes: [4, 8]}");
  const std::string too_few =
      ": every setting the small sweep will measure takes more images a step (the fewest: 16) "
      "than the 8 training images of the sweep's config, which train refuses; sweep smaller "
      "batches (--batch-sizes)";
  for (const auto& [set, card, says] :
       {std::tuple<std::string, std::string, std::string>{
            "sweep.precisions=[bf16]", "T4",
            "--card: no setting the small sweep will measure can run on T4 (15.00 GiB): bf16 "
            "needs compute capability 8.0 or later; T4 is sm_75"},
        std::tuple<std::string, std::string, std::string>{"sweep.batch_sizes=[16, 32]", "T4",
                                                          "--card" + too_few},
        std::tuple<std::string, std::string, std::string>{"sweep.batch_sizes=[16, 32]", "",
                                                          "--memory" + too_few}}) {
    plan.overrides = {training::Override(set)};
    plan.card.reset();
    if (!card.empty()) plan.card = training::find_card(card);
    plan.memory = plan.card ? plan.card->memory_bytes : 4 * kGiB;
    try {
      training::plan_command(plan);
      ADD_FAILURE() << "a sweep ran for " << set;
    } catch (const training::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "planned")) << set;
  }
}

// --target-batch 1024: each measured batch that divides it becomes micro-batch x accumulate_steps,
// its peak with the accumulated gradients (ResNet-50's, about 90 MiB) added; the fastest that fits
// a 4 GiB card (2.6 GiB for the allocator) is 64 x 16 without checkpointing: 128 x 8 (3400 MiB
// + gradients) and 256 x 4 checkpointed (2700 MiB + gradients) do not fit.
TEST(Plan, ATargetBatchIsReachedByTheFastestMicroBatchThatFits) {
  test_support::TempDir dir;
  const auto sweep = prepared_sweep(dir);
  const auto plan = training::make_plan(sweep, 4LL << 30, 0.10, kGiB, std::nullopt, 1024);
  EXPECT_EQ(plan.target_batch, 1024);
  EXPECT_GT(plan.gradient_bytes, 80 * MiB);  // ResNet-50's 23.5 million float gradients
  EXPECT_LT(plan.gradient_bytes, 100 * MiB);
  EXPECT_EQ(plan.candidates.size(), 6u);
  const auto& best = plan.candidates.at(*plan.chosen);
  EXPECT_EQ(best.batch, 64);
  EXPECT_EQ(best.setting.accumulate_steps, 16);
  EXPECT_EQ(best.predicted_peak, 1800 * MiB + plan.gradient_bytes);
  for (const auto& c : plan.candidates) {
    EXPECT_EQ(c.batch * c.setting.accumulate_steps, 1024);
    if (c.batch == 256) {
      EXPECT_FALSE(c.fits);  // 2700 MiB and the gradients
    }
  }
  EXPECT_NE(training::recommended_flags(plan, best).find("--set training.accumulate_steps=16"),
            std::string::npos);
  const std::string table = training::plan_table(plan);
  EXPECT_NE(
      table.find("| fp32 / checkpointing off / contiguous / 16 micro-batches | 64 x 16 | 150 |"),
      std::string::npos)
      << table;
  EXPECT_EQ(training::plan_json(plan).at("target_batch"), 1024);
  // The JSON holds the table's largest batch per setting (round 5: [] while the table listed
  // them), whatever the target.
  const auto largest = training::plan_json(plan).at("largest_batch_on_card");
  ASSERT_EQ(largest.size(), plan.cells.size());
  ASSERT_FALSE(largest.empty());
  for (size_t i = 0; i < largest.size(); ++i) {
    const auto& cell = plan.cells[i];
    EXPECT_EQ(largest[i].at("setting"), cell.setting.name());
    EXPECT_EQ(largest[i].at("source"), "fit");
    ASSERT_TRUE(cell.fit && cell.predictions.front().second);
    EXPECT_EQ(largest[i].at("largest_batch").get<int64_t>(), *cell.predictions.front().second);
    EXPECT_NE(table.find("| " + cell.setting.name() + " | " +
                         std::to_string(*cell.predictions.front().second) + " |"),
              std::string::npos)
        << table;
  }
  // A target one micro-batch reaches needs no accumulation and adds no gradients.
  const auto small = training::make_plan(sweep, 4LL << 30, 0.10, kGiB, std::nullopt, 128);
  for (const auto& c : small.candidates) {
    if (c.setting == plain && c.batch == 128) {
      EXPECT_EQ(c.predicted_peak, 3400 * MiB);
    }
  }
  // A target no measured batch divides, 0, negative or not a number: one line naming the flag.
  try {
    training::make_plan(sweep, 4LL << 30, 0.10, kGiB, std::nullopt, 1000);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--target-batch: 1000 is not a multiple of any batch the sweep measured ok (32, 64, "
              "128, 256); give a target one of them divides, or sweep micro-batches that divide "
              "it (--batch-sizes)");
  }
  // More micro-batches than training.accumulate_steps takes (65536) is no candidate.
  try {
    training::make_plan(sweep, 4LL << 30, 0.10, kGiB, std::nullopt, int64_t{1} << 32);
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--target-batch: 4294967296 needs more than 65536 "
                                          "micro-batches per step",
                                          0),
              0u)
        << e.what();
  }
  // 2^22: 32 would take 131072 micro-batches; 64 takes 65536, the most.
  const auto large =
      training::make_plan(sweep, 4LL << 30, 0.10, kGiB, std::nullopt, int64_t{1} << 22);
  EXPECT_EQ(large.candidates.size(), 5u);
  for (const auto& c : large.candidates) {
    EXPECT_NE(c.batch, 32);
    EXPECT_LE(c.setting.accumulate_steps, 65536);
  }
}

}  // namespace

// The prepared sweep with ResNet-18 (CIFAR stem) as its config's model: quick to record.
fs::path prepared_resnet18_sweep(const test_support::TempDir& dir) {
  const auto sweep = prepared_sweep(dir, "cpu", "resnet18");
  training::Config config = training::parse_config("", "test");
  config.model = models::ResNetOptions(18).stem(models::Stem::Cifar);
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  return sweep;
}

// With a card the plan replays this machine's stream on it and, for a CPU sweep, ranks by the
// card's estimated images/s, never by the CPU's (which favour the smallest batch here: 100 < 150 <
// 180 images/s would rank batch 128 first; reversed, the CPU's order would pick 32).
TEST(Plan, ACardIsRankedByItsEstimateNotByTheCpusSpeed) {
  test_support::TempDir dir;
  const auto sweep = prepared_resnet18_sweep(dir);
  const training::Card card = training::find_card("T4");
  // The allocator's options it replays under, from the variable LibTorch reads, are in its
  // outputs.
  ASSERT_EQ(setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True", 1), 0);
  const auto plan = training::make_plan(sweep, card.memory_bytes, 0.10, std::nullopt, card);
  unsetenv("PYTORCH_ALLOC_CONF");
  EXPECT_EQ(plan.speed_source.rfind("estimated for T4", 0), 0u) << plan.speed_source;
  ASSERT_TRUE(plan.chosen);
  for (const auto& c : plan.candidates) {
    EXPECT_NE(c.images_per_second, 100.0);  // none of the CPU's rates is left
    EXPECT_NE(c.images_per_second, 150.0);
    EXPECT_GE(c.predicted_peak, c.predicted_allocated);
    EXPECT_TRUE(c.fits) << c.setting.name() << " " << c.batch;  // ResNet-18 at 256 fits a T4
  }
  // Checkpointing recomputes the blocks' forward: at the same batch it is estimated slower.
  const auto rate = [&](const Setting& cell, int64_t batch) {
    for (const auto& c : plan.candidates) {
      if (c.setting == cell && c.batch == batch) return c.images_per_second;
    }
    return -1.0;
  };
  EXPECT_LT(rate(checkpointed, 128), rate(plain, 128));
  EXPECT_GE(rate(plain, 128), rate(plain, 32));
  ASSERT_EQ(plan.largest_on_card.size(), 2u);
  EXPECT_GT(plan.largest_on_card[0].second, 256);
  const auto json = training::plan_json(plan);
  EXPECT_EQ(json.at("candidates")[0].at("card").at("name"), "T4");
  EXPECT_TRUE(json.at("candidates")[0].contains("predicted_allocated_peak_bytes"));
  EXPECT_EQ(json.at("candidates")[0].at("allocator_options"), "expandable_segments:True");
  const std::string table = training::plan_table(plan);
  EXPECT_NE(table.find("the caching allocator's model, options expandable_segments:True ("),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("images/s (estimated)"), std::string::npos) << table;
  EXPECT_NE(table.find("Largest batch that fits on T4"), std::string::npos) << table;
}

// A sixth pass: with training.cuda_graph: auto (a captured step's speed is not estimated; a
// checkpointed step runs eager and is) the plan showed images/s 0 for the captured candidates,
// ranked them last as the slowest ("slower: 100% fewer images/s", "-nan%" where all were), and 0.0
// in the JSON.
TEST(Plan, ACandidateWithoutASpeedShowsNoFigureAndRanksAfterThoseWithOne) {
  test_support::TempDir dir;
  const auto sweep = prepared_sweep(dir, "cpu", "resnet18");
  training::Config config = training::parse_config("", "test");
  config.model = models::ResNetOptions(18).stem(models::Stem::Cifar);
  config.training.cuda_graph = training::CudaGraphMode::Auto;
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  const training::Card card = training::find_card("H100-SXM");
  const auto plan = training::make_plan(sweep, card.memory_bytes, 0.10, std::nullopt, card);
  ASSERT_TRUE(plan.chosen);
  EXPECT_TRUE(plan.candidates.at(*plan.chosen).speed_not_estimated.empty());
  bool without = false;
  for (const auto& c : plan.candidates) {
    // Captured where nothing stands in the way: the plain step; checkpointing runs eager.
    EXPECT_EQ(c.speed_not_estimated.empty(),
              c.setting.checkpointing != training::CheckpointMode::Off)
        << c.setting.name();
    if (!c.speed_not_estimated.empty()) without = true;
    EXPECT_TRUE(!without || !c.speed_not_estimated.empty()) << "a speed ranked after none";
  }
  EXPECT_TRUE(without);
  const std::string table = training::plan_table(plan);
  EXPECT_EQ(table.find("nan"), std::string::npos) << table;
  EXPECT_EQ(table.find("100% fewer"), std::string::npos) << table;
  EXPECT_NE(table.find("fits (speed not estimated: training.cuda_graph"), std::string::npos)
      << table;
  const auto json = training::plan_json(plan);
  for (const auto& row : json.at("candidates")) {
    const bool known = row.at("speed_not_estimated").is_null();
    EXPECT_EQ(row.at("images_per_second").is_number(), known) << row.dump();
    EXPECT_EQ(row.at("speed_bound").is_string(), known) << row.dump();
  }
}

// A card given by its size has no data sheet (issue 53): its plan borrowed the H100-80GB's speed
// silently. It now says it has none, shows no images/s and ranks by memory: the most images a step
// that fit first, the CPU's rates never used.
TEST(Plan, ACardGivenBySizeHasNoSpeedAndIsRankedByMemory) {
  test_support::TempDir dir;
  const auto sweep = prepared_resnet18_sweep(dir);
  const training::Card card = training::find_card("16GiB");
  const auto plan = training::make_plan(sweep, card.memory_bytes, 0.10, std::nullopt, card);
  EXPECT_EQ(plan.speed, training::Plan::Speed::None);
  EXPECT_EQ(plan.speed_source,
            "no data sheet for '16GiB': speeds not estimated; ranked by memory only (the largest "
            "batch that fits first)");
  ASSERT_TRUE(plan.chosen);
  int64_t largest = 0;
  for (const auto& c : plan.candidates) {
    EXPECT_EQ(c.images_per_second, 0.0);  // no rate of the CPU's or of another card
    if (c.fits) largest = std::max(largest, c.batch);
  }
  EXPECT_EQ(plan.candidates[*plan.chosen].batch, largest);
  const std::string table = training::plan_table(plan);
  EXPECT_EQ(table.find("images/s (estimated)"), std::string::npos) << table;
  EXPECT_NE(table.find("fits (speed not estimated"), std::string::npos) << table;
  EXPECT_TRUE(training::plan_json(plan).at("candidates")[0].at("images_per_second").is_null());
  // Hostile pass 8: each candidate's `speed_not_estimated` was null where the table says "speed
  // not estimated": why, as train memory --card says it per setting.
  for (const auto& row : candidates_of(plan)) {
    EXPECT_EQ(row.at("speed_not_estimated"), "no data sheet for '16GiB': speeds not estimated")
        << row.dump();
  }
}

// Without a speed the candidates rank by images a step, then by the smaller peak; a candidate that
// ties on both was said to have "fewer images a step". And the headroom is said as given ("99.9%"
// was "100%", which the flag refuses).
TEST(Plan, WithoutASpeedEachVerdictSaysWhyItRanksBelowAndTheHeadroomAsGiven) {
  training::Plan plan;
  plan.speed = training::Plan::Speed::None;
  plan.card_bytes = int64_t{1} << 30;
  plan.headroom = 0.12345;
  training::PlanCandidate a;
  a.batch = 32;
  a.predicted_peak = 100 << 20;
  a.fits = true;
  auto tie = a, larger = a, fewer = a;
  tie.setting.checkpointing = training::CheckpointMode::On;
  larger.predicted_peak = 200 << 20;
  fewer.batch = 16;
  plan.candidates = {a, tie, larger, fewer};
  plan.chosen = 0;
  const std::string table = training::plan_table(plan);
  for (const char* verdict :
       {"fits (speed not estimated: as many images a step and the same peak; the recommended one "
        "is listed first)",
        "fits (speed not estimated: as many images a step, a larger peak)",
        "fits (speed not estimated: fewer images a step)", "12.345% headroom"}) {
    EXPECT_NE(table.find(verdict), std::string::npos) << verdict << "\n" << table;
  }
  EXPECT_EQ(table.find("fewer images a step"), table.rfind("fewer images a step")) << table;
  EXPECT_EQ(training::config_yaml::percent_text(0.999), "99.9%");
  EXPECT_EQ(training::config_yaml::percent_text(0.1), "10%");
  EXPECT_EQ(training::config_yaml::percent_text(-0.0), "0%");
  // Sixteenth pass: nine digits said 99.99999999% as 100% (refused typed back) and 12.3456789012%
  // as 12.3456789%; each is said as it reads back.
  for (const char* given : {"99.99999999%", "12.3456789012%", "0.000001%", "33.333333333333336%",
                            "99.99999999999999%", "0.9999999999999999"}) {
    const double share = *training::config_yaml::real_number(given, true);
    EXPECT_DOUBLE_EQ(
        *training::config_yaml::real_number(training::config_yaml::percent_text(share), true),
        share)
        << given << " said as " << training::config_yaml::percent_text(share);
    EXPECT_LT(*training::config_yaml::real_number(training::config_yaml::percent_text(share), true),
              1)
        << given << " said as " << training::config_yaml::percent_text(share);
  }
  EXPECT_EQ(training::config_yaml::percent_text(
                *training::config_yaml::real_number("99.99999999%", true)),
            "99.99999999%");
}

namespace {

// The plan on the card `name` of a CPU sweep of ResNet-18 (CIFAR stem) with `cells` and `trials`.
training::Plan plan_on_card(const test_support::TempDir& dir, const std::vector<Setting>& cells,
                            const std::vector<training::SweepTrial>& trials,
                            const std::string& name) {
  training::SweepFacts facts{"resnet18", "cifar", "cpu", "cpu", 64LL << 30, false, 1, 2, {}};
  const fs::path sweep = sweep_folder(dir / "sweep");
  training::write_sweep_tables(sweep, facts, training::summarize(cells, trials, {}, false), trials,
                               true);
  training::Config config = training::parse_config("", "test");
  config.model = models::ResNetOptions(18).stem(models::Stem::Cifar);
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  const training::Card card = training::find_card(name);
  return training::make_plan(sweep, card.memory_bytes, 0.10, std::nullopt, card);
}

}  // namespace

// An auto cell keeps the sweep's own peaks on a card (its blocks are chosen under the sweep's
// budget, not replayed): plan.json gave it an allocated peak of 0.
TEST(Plan, AnAutoCellOnACardKeepsItsMeasuredPeaks) {
  test_support::TempDir dir;
  const auto ok = training::TrialStatus::Ok;
  std::vector<training::SweepTrial> trials = {trial(1, plain, 32, 1000 * MiB, 100, ok),
                                              trial(2, automatic, 64, 700 * MiB, 90, ok)};
  trials[1].result.peak_allocated_bytes = 650 * MiB;
  const auto plan = plan_on_card(dir, {plain, automatic}, trials, "T4");
  const auto json = training::plan_json(plan);
  bool found = false;
  for (const auto& c : json.at("candidates")) {
    if (c.at("checkpointing") != "auto") continue;
    found = true;
    EXPECT_EQ(c.at("predicted_reserved_peak_bytes"), 700 * MiB);
    EXPECT_EQ(c.at("predicted_allocated_peak_bytes"), 650 * MiB);
  }
  EXPECT_TRUE(found) << json.dump();
}

// Round 5: an auto cell kept the sweep's measured peak on a card even where, on that card, not
// even every block recomputed (the least auto reaches) fits: it was recommended as fitting. It
// now does not fit, and says why.
TEST(Plan, AnAutoCellWhoseEveryBlockRecomputedDoesNotFitTheCardDoesNotFit) {
  test_support::TempDir dir;
  const auto ok = training::TrialStatus::Ok;
  // Measured under a large budget on another machine: batch 4096 at 700 MiB, as its trial said.
  std::vector<training::SweepTrial> trials = {trial(1, plain, 8, 300 * MiB, 100, ok),
                                              trial(2, automatic, 4096, 700 * MiB, 500, ok)};
  const auto plan = plan_on_card(dir, {plain, automatic}, trials, "4GiB");
  ASSERT_TRUE(plan.chosen);
  EXPECT_EQ(plan.candidates.at(*plan.chosen).setting, plain);
  const std::string table = training::plan_table(plan);
  EXPECT_NE(table.find("does not fit, not even with every block recomputed (the least "
                       "checkpointing auto holds): needs a card of at least"),
            std::string::npos)
      << table;
  for (const auto& c : candidates_of(plan)) {
    if (c.at("checkpointing") == "auto") {
      EXPECT_FALSE(c.at("fits").get<bool>()) << c.dump();
      EXPECT_GT(c.at("predicted_reserved_peak_bytes").get<int64_t>(), plan.card_bytes);
    }
  }
}

// bf16 needs compute capability 8.0: on a T4 (sm_75) a bf16 setting is "cannot run", never
// ranked by an estimated 0 images/s or recommended.
TEST(Plan, ACardThatCannotRunBf16SaysSo) {
  test_support::TempDir dir;
  const auto sweep = prepared_resnet18_sweep(dir);
  auto json = nlohmann::json::parse(test_support::read_text(sweep / "sweep.json"));
  for (auto& row : json.at("trials")) {
    if (row.at("checkpointing") == true) row["precision"] = "bf16";
  }
  std::ofstream(sweep / "sweep.json") << json.dump();
  const training::Card t4 = training::find_card("T4");
  const auto plan = training::make_plan(sweep, t4.memory_bytes, 0.10, std::nullopt, t4);
  int refused = 0;
  for (const auto& c : plan.candidates) {
    if (c.setting.precision != Precision::BF16) continue;
    ++refused;
    EXPECT_FALSE(c.fits);
    EXPECT_EQ(c.unsupported, "bf16 needs compute capability 8.0 or later; T4 is sm_75");
  }
  EXPECT_EQ(refused, 3);
  EXPECT_EQ(plan.candidates.at(*plan.chosen).setting.precision, Precision::FP32);
  EXPECT_NE(training::plan_table(plan).find("cannot run: bf16 needs compute capability 8.0"),
            std::string::npos);
  // Round 5: their JSON gave images/s 0 and the CPU sweep's peaks as the card's: null, as the
  // table's "-" (they are neither replayed nor timed).
  for (const auto& row : candidates_of(plan)) {
    if (row.at("precision") != "bf16") continue;
    for (const char* key : {"images_per_second", "predicted_reserved_peak_bytes",
                            "predicted_device_bytes", "predicted_allocated_peak_bytes"}) {
      EXPECT_TRUE(row.at(key).is_null()) << key << ": " << row.dump();
    }
    // Hostile pass 8: with images/s null, why (as train memory --card says it), not null.
    EXPECT_EQ(row.at("speed_not_estimated"),
              "bf16 needs compute capability 8.0 or later; T4 is sm_75")
        << row.dump();
  }
  EXPECT_NE(training::plan_table(plan).find(" | - | - | cannot run: bf16"), std::string::npos)
      << training::plan_table(plan);

  // Where nothing fits, the smallest named is one the card can run: a bf16 setting, never
  // replayed on the T4, was named with its CPU peak ("needs a card of at least 1001MiB", on a
  // 15 GiB card). Here the fp32 settings hold data.device_resident's 10M images (28.8 GiB).
  training::Config config = training::parse_config("", "test");
  config.model = models::ResNetOptions(18).stem(models::Stem::Cifar);
  config.data.device_resident = true;
  config.data.dataset.source(data::Source::Synthetic).synthetic_train_size(10000000);
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  try {
    training::make_plan(sweep, t4.memory_bytes, 0.10, std::nullopt, t4);
    ADD_FAILURE() << "a plan fitted 28.8 GiB of data on a T4";
  } catch (const training::UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("the smallest, fp32 / checkpointing off"), std::string::npos) << message;
    EXPECT_NE(message.find("needs a card of at least 3"), std::string::npos) << message;  // 3x GiB
  }
  // The plan says the data its peaks hold, in its table and JSON.
  config.data.dataset.synthetic_train_size(1000);
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  const auto held = training::make_plan(sweep, t4.memory_bytes, 0.10, std::nullopt, t4);
  const int64_t resident = data::device_resident_bytes(1000, 10000, 1000);
  EXPECT_EQ(held.device_resident_bytes, resident);
  EXPECT_NE(training::plan_table(held).find("with data.device_resident's splits and epoch order"),
            std::string::npos);
  EXPECT_EQ(training::plan_json(held).at("candidates")[0].at("device_resident_bytes"), resident);
}

// The card a plan says it needs is one on which that plan is made: the named card's figure (its
// own cuBLAS workspaces) and, below compute capability 9, the size `--card` takes (32 MiB ones),
// each from the smallest limit its replay fits under, not its reserved peak there. Round 5: a T4
// "needs 33810MiB" where `--card 33810MiB` asked 33859MiB.
TEST(Plan, TheCardItSaysItNeedsIsOneItsPlanIsMadeOn) {
  test_support::TempDir dir;
  const auto sweep = prepared_resnet18_sweep(dir);
  training::Config config = training::parse_config("", "test");
  config.model = models::ResNetOptions(18).stem(models::Stem::Cifar);
  config.data.device_resident = true;  // 6M images (17.3 GiB): nothing fits a T4's 15 GiB
  config.data.dataset.source(data::Source::Synthetic).synthetic_train_size(6000000);
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  const training::Card t4 = training::find_card("T4");
  std::string message;
  try {
    training::make_plan(sweep, t4.memory_bytes, 0.10, std::nullopt, t4);
    FAIL() << "a plan fitted 17.3 GiB of data on a T4";
  } catch (const training::UserError& e) {
    message = e.what();
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(message, m,
                                std::regex("needs a card of at least ([0-9]+MiB) \\(a card given "
                                           "by its size, with cuBLAS workspaces of 32.00 MiB: "
                                           "--card ([0-9]+MiB)\\)$")))
      << message;
  const int64_t named = training::parse_byte_size(m[1].str());
  const int64_t by_size = training::parse_byte_size(m[2].str());
  EXPECT_GT(by_size, named);  // two workspaces of 32 MiB, not 8.125 MiB
  training::Card larger_t4 = t4;
  larger_t4.memory_bytes = named;
  EXPECT_TRUE(training::make_plan(sweep, named, 0.10, std::nullopt, larger_t4).chosen);
  const training::Card sized = training::find_card(m[2].str());
  const auto plan = training::make_plan(sweep, by_size, 0.10, std::nullopt, sized);
  EXPECT_TRUE(plan.chosen);
  for (const auto& row : candidates_of(plan)) {
    EXPECT_EQ(row.at("needed_card_by_size_bytes").is_null(), true) << row.dump();
    EXPECT_EQ(row.at("needed_card_bytes").is_null(), row.at("fits").get<bool>()) << row.dump();
  }
  const training::Card smaller = training::find_card(std::to_string(by_size / MiB - 1) + "MiB");
  try {
    training::make_plan(sweep, smaller.memory_bytes, 0.10, std::nullopt, smaller);
    ADD_FAILURE() << "a card 1 MiB below the size advised was given a plan";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a card of at least " + m[2].str()),
              std::string::npos)
        << e.what();
  }
}

// Twelfth pass: with --card T4 the size advised for a card given by its size was the one of the
// setting smallest on the T4, where another is smaller on a card given by its size (other cuBLAS
// workspaces): that one's size is advised, naming it.
TEST(Plan, TheSizeAdvisedForACardGivenByItsSizeIsTheSmallestOnSuchACard) {
  training::Plan plan;
  training::PlanCandidate on_t4, by_size;
  on_t4.setting = by_size.setting = plain;
  on_t4.batch = 100;
  on_t4.needed_limit = 1000 * MiB;
  on_t4.needed_limit_by_size = 1040 * MiB;
  by_size.batch = 103;
  by_size.needed_limit = 1010 * MiB;
  by_size.needed_limit_by_size = 1030 * MiB;
  EXPECT_EQ(training::needs_card_text(plan, on_t4),
            "needs a card of at least 1000MiB (a card given by its size, with cuBLAS workspaces "
            "of 32.00 MiB: --card 1040MiB)");
  EXPECT_EQ(training::needs_card_text(plan, on_t4, &by_size),
            "needs a card of at least 1000MiB (a card given by its size, with cuBLAS workspaces "
            "of 32.00 MiB: --card 1030MiB, for " +
                plain.name() + " at batch 103)");
  // Fourteenth pass: at a headroom near 100% the card it needs is above the largest --card and
  // --memory take (929563705032MiB was advised, then refused): it says so, and the JSON is null.
  plan.headroom = 0.999999999;
  EXPECT_EQ(training::needs_card_text(plan, on_t4, &by_size),
            "needs a card above 1024TiB, the largest --card and --memory take, at 99.9999999% "
            "headroom");
  EXPECT_FALSE(training::card_needed_for(plan, on_t4.needed_limit).has_value());
  plan.headroom = 1 - 1e-15;  // far beyond: no overflow on the way
  EXPECT_FALSE(training::card_needed_for(plan, on_t4.needed_limit).has_value());
}

// Thirteenth pass's review: the plan's no-room check judged the config's precision (bf16, its
// autocast copies counted) where the grid sweeps fp32 too, which fits: refused only where no
// precision of the grid fits.
TEST(Plan, NoRoomIsJudgedAtEachPrecisionTheGridSweeps) {
  training::Config grid;
  grid.training.precision = training::Precision::BF16;
  grid.sweep.precisions = {training::Precision::BF16, training::Precision::FP32};
  training::Config in_fp32 = grid;
  in_fp32.training.precision = training::Precision::FP32;
  const int64_t room = training::held_whatever_the_batch(in_fp32).bytes +
                       training::one_image_bytes(in_fp32);  // the allocator's share: fp32 fits
  const int64_t card = room + 100 * MiB;
  EXPECT_NO_THROW(training::refuse_no_room(std::nullopt, card, 0.0, 100 * MiB, &grid));
  grid.sweep.precisions = {training::Precision::BF16};
  try {
    training::refuse_no_room(std::nullopt, card, 0.0, 100 * MiB, &grid);
    ADD_FAILURE() << "a bf16 grid below its weights' copies was planned";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(", sweep.precisions [fp32] or a smaller model.arch"),
              std::string::npos)
        << e.what();
  }
}

// A size `--card` refuses (above 1024TiB) is never advised: the needed figure alone is said.
TEST(Plan, NoSizeAboveTheLargestCardIsAdvisedForACardGivenByItsSize) {
  training::Plan plan;
  training::PlanCandidate huge;
  huge.setting = plain;
  huge.batch = 100;
  huge.needed_limit = training::kLargestCard;
  huge.needed_limit_by_size = training::kLargestCard + MiB;
  EXPECT_EQ(training::needs_card_text(plan, huge), "needs a card of at least 1024TiB");
}

// A measured batch larger than the sweep config's training set fits but does not train: `train`
// refuses it. It is never recommended, its row says why, and where none trains that is said.
// Round 5: a sweep measured at 128 with 100 training images was recommended
// `--set training.batch_size=128`.
TEST(Plan, ABatchTheTrainingSetCannotFillIsNeverRecommended) {
  test_support::TempDir dir;
  const auto sweep = prepared_sweep(dir);
  training::Config config = training::parse_config("", "test");
  config.data.dataset.source(data::Source::Synthetic).synthetic_train_size(100);
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  const auto plan = training::make_plan(sweep, 64LL << 30, 0.10, kGiB);
  ASSERT_TRUE(plan.chosen);
  EXPECT_EQ(plan.candidates.at(*plan.chosen).batch, 64);  // 128 (180 img/s) fits, 100 images
  const std::string table = training::plan_table(plan);
  EXPECT_NE(table.find("| 128 | 180 | 3.32 GiB | cannot train: batch 128 is more than the "
                       "100 training images of the sweep's config, which train refuses "
                       "(training.batch_size) |"),
            std::string::npos)
      << table;
  for (const auto& row : candidates_of(plan)) {
    EXPECT_EQ(row.at("untrainable").is_null(), row.at("batch_size").get<int64_t>() <= 100);
  }
  // Accumulated: micro-batch x steps is what an epoch must hold.
  try {
    training::make_plan(sweep, 64LL << 30, 0.10, kGiB, std::nullopt, 128);
    ADD_FAILURE() << "a target batch above the training set was planned";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--target-batch: 128 images a step are more than the 100 training images of the "
              "sweep's config, which train refuses; give at most 100");
  }
  config.data.dataset.synthetic_train_size(16);  // below every measured batch
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  try {
    training::make_plan(sweep, 64LL << 30, 0.10, kGiB);
    ADD_FAILURE() << "a plan recommended a batch larger than 16 training images";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--memory: every measured setting takes more images a step (the fewest: 32) than "
              "the 16 training images of the sweep's config, which train refuses; sweep smaller "
              "batches (--batch-sizes)");
  }
}

// Fitting is not monotone in the batch (the allocator's rounding and its reuse of segments): on a
// 1606MiB card (10% headroom, 771 MiB outside the allocator) ResNet-18 (CIFAR stem) fp32 fits
// batch 99, not 100, and 102 again. The plan recommended `--set training.batch_size=102` beside a
// largest batch that fits of 99, the search's edge from below. The largest batch per setting is
// never below a batch the plan says fits, in the table and the JSON.
TEST(Plan, TheLargestBatchOnACardIsNeverBelowOneItSaysFits) {
  test_support::TempDir dir;
  const auto ok = training::TrialStatus::Ok;
  const std::vector<training::SweepTrial> trials = {trial(1, plain, 32, 1000 * MiB, 100, ok),
                                                    trial(2, plain, 100, 2000 * MiB, 150, ok),
                                                    trial(3, plain, 102, 2100 * MiB, 160, ok)};
  training::SweepFacts facts{"resnet18", "cifar", "cpu", "cpu", 64LL << 30, false, 1, 2, {}};
  const fs::path sweep = sweep_folder(dir / "sweep");
  training::write_sweep_tables(sweep, facts, training::summarize({plain}, trials, {}, false),
                               trials, true);
  training::Config config = training::parse_config("", "test");
  config.model = models::ResNetOptions(18).stem(models::Stem::Cifar);
  std::ofstream(sweep / "config.yaml") << training::to_yaml(config);
  const training::Card card = training::find_card("1606MiB");
  const auto plan = training::make_plan(sweep, card.memory_bytes, 0.10, std::nullopt, card);
  ASSERT_TRUE(plan.chosen);
  std::map<int64_t, bool> fits;
  for (const auto& c : plan.candidates) fits[c.batch] = c.fits;
  ASSERT_TRUE(fits[32] && !fits[100] && fits[102]) << "the case is elsewhere now: find another";
  EXPECT_EQ(plan.candidates.at(*plan.chosen).batch, 102);  // no speed: the most images first
  ASSERT_EQ(plan.largest_on_card.size(), 1u);
  const int64_t largest = plan.largest_on_card[0].second;
  EXPECT_GE(largest, 102);
  const std::string table = training::plan_table(plan);
  EXPECT_NE(
      table.find("| fp32 / checkpointing off / contiguous | " + std::to_string(largest) + " |\n"),
      std::string::npos)
      << table;
  EXPECT_EQ(training::plan_json(plan).at("largest_batch_on_card")[0].at("largest_batch"), largest);
  // Below it, a candidate that does not fit says why beside that figure.
  const size_t row = table.find("| fp32 / checkpointing off / contiguous | 100 | - | ");
  ASSERT_NE(row, std::string::npos) << table;
  EXPECT_NE(
      table.substr(row, table.find('\n', row) - row)
          .find("| does not fit (below the largest batch that fits, " + std::to_string(largest) +
                ": fitting is not monotone in the batch): needs a card of at least "),
      std::string::npos)
      << table;
}

namespace {}  // namespace
