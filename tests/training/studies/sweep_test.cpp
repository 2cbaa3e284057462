// Sweeps on the CPU with small models and emulated memory limits, trials in child processes of
// the real `train` binary.
#include "training/studies/sweep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "data/dataset.h"
#include "models/resnet.h"
#include "test_support.h"
#include "training/config/config.h"
#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/platform/stop_signal.h"
#include "training/studies/plan.h"
#include "training/studies/sweep_report.h"
#include "training/studies/trial.h"

namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

// The plots need a Python with matplotlib: the one the build found.
const bool python_chosen = setenv("TRAIN_PYTHON", TEST_PYTHON, /*overwrite=*/0) == 0;

// run_sweep of `config` into `out` (with `card`, "" for none), a graceful stop requested at the
// test point `moment` (stop_signal.h); the stop cleared after it.
int sweep_stopped_at(const std::string& moment, const fs::path& config, const fs::path& out,
                     const std::string& card = "") {
  ::setenv("TRAIN_TEST_STOP_AT", moment.c_str(), 1);
  const int code = training::run_sweep({config.string(), {}, out.string(), TRAIN_BINARY, card});
  ::unsetenv("TRAIN_TEST_STOP_AT");
  training::clear_stop_request();
  return code;
}

fs::path write_config(const test_support::TempDir& dir, const std::string& yaml) {
  std::ofstream(dir / "sweep.yaml") << yaml;
  return dir / "sweep.yaml";
}

// Runs `train sweep-trial` on `config` at one batch size, as the sweep would: its result.json.
nlohmann::json trial_result(const test_support::TempDir& dir, const fs::path& base_config,
                            int64_t batch) {
  auto config =
      training::load_config(base_config.string(), {"training.batch_size=" + std::to_string(batch)});
  const auto yaml = dir / ("direct-" + std::to_string(batch) + ".yaml");
  std::ofstream(yaml) << training::to_yaml(config);
  const auto result = dir / ("direct-" + std::to_string(batch) + ".json");
  training::run_process(
      {TRAIN_BINARY, "sweep-trial", "--config", yaml.string(), "--result", result.string()},
      dir / "direct.log", 600);
  return read_json(result);
}

std::string trial_status(const test_support::TempDir& dir, const fs::path& base_config,
                         int64_t batch) {
  return trial_result(dir, base_config, batch).at("status").get<std::string>();
}

// `train` itself with the sweep's config at one batch size: three steps on synthetic data (from
// the second on, the optimizer's momentum exists, as in the trial's measured steps; the decoded
// dataset is host data and does not count against memory.limit), a small evaluation.
// `train` at `batch` of the sweep's first cell (fp32, checkpointing off, contiguous) with the
// flags the sweep gives for it (run_flags: the layout set, not left to train's auto).
int train_exit_code(const test_support::TempDir& dir, const fs::path& config, int64_t batch) {
  std::vector<std::string> args{TRAIN_BINARY,
                                "--config",
                                config.string(),
                                "--output-dir",
                                (dir / ("train-" + std::to_string(batch))).string(),
                                "--set",
                                "data.source=synthetic",
                                "--set",
                                "data.synthetic_train_size=" + std::to_string(3 * batch + 3),
                                "--set",
                                "data.synthetic_test_size=16",
                                "--set",
                                "training.eval_batch_size=8",
                                "--set",
                                "training.max_steps=3",
                                "--set",
                                "checkpoint.enabled=false"};
  std::istringstream flags(training::run_flags(training::Setting{}, batch, 0));
  for (std::string word; flags >> word;) args.push_back(word);
  return training::run_process(args, dir / "train.log", 600).exit_code;
}

// The limit is derived from this CPU's own trials (peaks differ between CPUs' kernels): batch 16
// and 32 measured without it, the limit where the fit puts batch 48, so that find-max has to
// search above the batches it was given.
TEST(Sweep, FindMaxFindsTheLargestBatchUnderAnEmulatedLimit) {
  test_support::TempDir dir;
  const std::string yaml = R"(
model: {arch: resnet18, stem: imagenet}
training: {device: cpu}
sweep: {batch_sizes: [16, 32], warmup_steps: 0, measure_steps: 2, find_max: true}
)";
  const auto unlimited = write_config(dir, yaml);
  const int64_t at16 = trial_result(dir, unlimited, 16).at("peak_allocated_bytes");
  const int64_t at32 = trial_result(dir, unlimited, 32).at("peak_allocated_bytes");
  ASSERT_GT(at32, at16);
  const int64_t mib = int64_t{1} << 20;
  const int64_t limit = (at32 + (at32 - at16)) / mib * mib;  // about batch 48
  const auto config =
      write_config(dir, yaml + "memory: {limit: " + training::byte_size_text(limit) + "}\n");
  training::SweepRequest request{config.string(), {}, (dir / "out").string(), TRAIN_BINARY, ""};
  ASSERT_EQ(training::run_sweep(request), 0);
  const auto sweep = read_json(dir / "out/sweep.json");
  EXPECT_TRUE(sweep.at("complete").get<bool>());
  const auto& cell = sweep.at("cells").at(0);
  ASSERT_FALSE(cell.at("largest_fitting_batch").is_null());
  const int64_t max_batch = cell.at("largest_fitting_batch").get<int64_t>();
  EXPECT_EQ(cell.at("smallest_failing_batch").get<int64_t>(), max_batch + 1);
  EXPECT_GT(max_batch, 32);
  // Checked directly: the largest batch fits, one more does not.
  EXPECT_EQ(trial_status(dir, config, max_batch), "ok");
  const auto over = trial_result(dir, config, max_batch + 1);
  EXPECT_EQ(over.at("status"), "oom");
  EXPECT_NE(over.at("message").get<std::string>().find("limit " + training::format_bytes(limit) +
                                                       " (memory.limit)"),
            std::string::npos)
      << over.dump();
  // Out of memory before a measured step completed (no warm-up here: before any step), it
  // measured no step's time or steady peak: null, never 0 (or the first step's peak as the steady
  // one), in trials/NNN.json, sweep.json and sweep.csv (an empty cell).
  for (const char* key : {"median_step_seconds", "images_per_second", "steady_peak_allocated_bytes",
                          "steady_peak_reserved_bytes"}) {
    EXPECT_EQ(over.at(key).is_null(), over.at("steps") == 0) << key << ": " << over.dump();
  }
  // And the answer holds for `train` with the same config: B trains, B+1 is out of memory.
  EXPECT_EQ(train_exit_code(dir, config, max_batch), 0)
      << test_support::read_text(dir / "train.log");
  EXPECT_EQ(train_exit_code(dir, config, max_batch + 1), 3)
      << test_support::read_text(dir / "train.log");

  for (const char* file :
       {"sweep.csv", "sweep.md", "config.yaml", "trials/001.yaml", "trials/001.json"}) {
    EXPECT_TRUE(fs::exists(dir / "out" / file)) << file;
  }
  // Round 5: trials without checkpointing auto chose no blocks: sweep.csv's cell is empty, as the
  // docs say (it was []), and sweep.json's null; the sweep reads back as written.
  const std::string csv = test_support::read_text(dir / "out/sweep.csv");
  EXPECT_NE(csv.find(",recomputed_blocks,"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("[]"), std::string::npos) << csv;
  const auto swept = read_json(dir / "out" / "sweep.json");  // held: the loop walks its part
  for (const auto& trial : swept.at("trials")) {
    EXPECT_TRUE(trial.at("recomputed_blocks").is_null()) << trial.dump();
    const bool measured = trial.at("steps") > 0;  // no warm-up: every step completed is measured
    for (const char* key : {"median_step_seconds", "images_per_second",
                            "steady_peak_allocated_bytes", "steady_peak_reserved_bytes"}) {
      EXPECT_EQ(trial.at(key).is_null(), !measured) << key << ": " << trial.dump();
    }
  }
  {  // sweep.csv: the cells of the rows that measured no step are empty
    std::istringstream lines(csv);
    std::string header, line;
    std::getline(lines, header);
    auto cells = [](const std::string& row) {
      std::vector<std::string> out;
      std::istringstream in(row);
      for (std::string cell; std::getline(in, cell, ',');) out.push_back(cell);
      if (!row.empty() && row.back() == ',') out.emplace_back();
      return out;
    };
    const auto names = cells(header);
    const auto column = [&](const std::string& name) {
      return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
    };
    while (std::getline(lines, line)) {
      const auto row = cells(line);
      if (row.size() != names.size()) continue;  // a quoted message holding a comma
      const bool measured = row.at(column("steps")) != "0";
      EXPECT_EQ(row.at(column("median_step_seconds")).empty(), !measured) << line;
      EXPECT_EQ(row.at(column("images_per_second")).empty(), !measured) << line;
      EXPECT_EQ(row.at(column("steady_peak_reserved_bytes")).empty(), !measured) << line;
    }
  }
  EXPECT_NO_THROW(training::read_sweep(dir / "out"));
  for (const char* png : {"peak_memory.png", "throughput.png"}) {
    std::ifstream in(dir / "out" / png, std::ios::binary);
    char signature[8] = {};
    in.read(signature, 8);
    EXPECT_EQ(std::string(signature + 1, 3), "PNG") << png;
    EXPECT_GT(fs::file_size(dir / "out" / png), 10000u) << png;
  }
  const std::string text = test_support::read_text(dir / "out/sweep.md");
  EXPECT_NE(text.find("| fp32 / checkpointing off / contiguous | " + std::to_string(max_batch) +
                      " | " + std::to_string(max_batch + 1) + " |"),
            std::string::npos)
      << text;
  // The answer comes with the flags that train it as measured, the layout among them.
  EXPECT_NE(text.find("- fp32 / checkpointing off / contiguous: `--set training.batch_size=" +
                      std::to_string(max_batch) +
                      " --set training.precision=fp32 --set training.memory_format=contiguous "
                      "--set checkpointing.enabled=off --memory-limit " +
                      training::byte_size_text(limit) + "`"),
            std::string::npos)
      << text;
}

TEST(Sweep, TheFitPredictsAHeldOutBatchWithinTenPercent) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: cifar}
training: {device: cpu}
sweep: {batch_sizes: [8, 16, 32], warmup_steps: 1, measure_steps: 1}
)");
  training::SweepRequest request{config.string(), {}, (dir / "out").string(), TRAIN_BINARY, ""};
  ASSERT_EQ(training::run_sweep(request), 0);
  const auto fit = read_json(dir / "out/sweep.json").at("cells").at(0).at("fit");
  ASSERT_FALSE(fit.is_null());
  EXPECT_GT(fit.at("r_squared").get<double>(), 0.99);
  const double predicted =
      fit.at("intercept_bytes").get<double>() + 48 * fit.at("bytes_per_sample").get<double>();

  training::run_sweep(
      {config.string(), {"sweep.batch_sizes=[48]"}, (dir / "held-out").string(), TRAIN_BINARY, ""});
  const auto measured = read_json(dir / "held-out/sweep.json")
                            .at("trials")
                            .at(0)
                            .at("peak_reserved_bytes")
                            .get<double>();
  std::cout << "batch 48: predicted " << predicted / (1 << 20) << " MiB, measured "
            << measured / (1 << 20) << " MiB\n";
  EXPECT_NEAR(predicted, measured, 0.10 * measured);
}

// sweep.accumulate_steps: a trial of 2 micro-batches per step holds the first one's gradients
// while the second runs forward, so its peak is above the 1-micro-batch trial's by about the
// gradients (ResNet-18: 11.2 million floats, 42.6 MiB), and it says so in the tables.
TEST(Sweep, AnAccumulationTrialHoldsTheGradientsBesideItsMicroBatch) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: cifar}
training: {device: cpu}
sweep: {batch_sizes: [16], accumulate_steps: [1, 2], warmup_steps: 1, measure_steps: 1}
)");
  ASSERT_EQ(training::run_sweep({config.string(), {}, (dir / "out").string(), TRAIN_BINARY, ""}),
            0);
  const auto trials = read_json(dir / "out/sweep.json").at("trials");
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials.at(0).at("accumulate_steps"), 1);
  EXPECT_EQ(trials.at(1).at("accumulate_steps"), 2);
  const auto peak = [&](int i) { return trials.at(i).at("peak_allocated_bytes").get<double>(); };
  const double gradients = 11173962.0 * 4;
  EXPECT_GT(peak(1) - peak(0), 0.5 * gradients) << peak(0) << " " << peak(1);
  EXPECT_LT(peak(1) - peak(0), 1.5 * gradients) << peak(0) << " " << peak(1);
  const auto md = test_support::read_text(dir / "out/sweep.md");
  EXPECT_NE(md.find("| fp32 | off | contiguous | 16 x 2 | ok |"), std::string::npos) << md;
}

// `train` with `config` for `max_steps` steps into dir/train, no checkpoint, then the words of
// `flags` (a --set line the program advises, a limit).
std::vector<std::string> train_args(const test_support::TempDir& dir, const fs::path& config,
                                    int64_t max_steps, const std::string& flags) {
  std::vector<std::string> args{TRAIN_BINARY,
                                "--config",
                                config.string(),
                                "--output-dir",
                                (dir / "train").string(),
                                "--set",
                                "training.max_steps=" + std::to_string(max_steps),
                                "--set",
                                "checkpoint.enabled=false"};
  std::istringstream words(flags);
  for (std::string word; words >> word;) args.push_back(word);
  return args;
}

// Round 5: a trial of 1 + 1 steps of 2 micro-batches each, with data.prefetch 2, drew an epoch of
// 4 batches: its measured step held no prefetched batch, where training's steady steps hold the
// full queue, so find-max's answer ran out of memory in training's second step under the limit it
// had fitted; a step of 2 micro-batches also held the trainer's copy of the BatchNorm statistics
// (38 KB) and its running sums. A batch whose trial fits a limit (the trial's peak) trains under
// it, give or take 1 KiB of the trainer's own scalars.
TEST(Sweep, ABatchWhoseTrialFitsALimitTrainsUnderIt) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: imagenet}
data: {source: synthetic, synthetic_train_size: 256, synthetic_test_size: 64, prefetch: 2}
training: {device: cpu, threads: 1, accumulate_steps: 2}
sweep: {warmup_steps: 1, measure_steps: 1}
)");
  const auto trial = trial_result(dir, config, 32);
  ASSERT_EQ(trial.at("status"), "ok") << trial.dump();
  const int64_t peak = trial.at("peak_reserved_bytes");
  const auto args = train_args(dir, config, 3,
                               "--memory-limit " + std::to_string(peak + 1024) + "B " +
                                   training::run_flags(training::Setting{}, 32, 0));
  EXPECT_EQ(training::run_process(args, dir / "train.log", 600).exit_code, 0)
      << test_support::read_text(dir / "train.log");
}

// Round 5: `train plan --memory X --headroom 0` at exactly a checkpointed setting's peak advised
// checkpointing.budget=X, which auto then refused by 2 KiB: it takes the epoch order of the run's
// training split (256 samples) off the budget, where the trial's own split was smaller. The trial
// now holds the run's order: the budget advised is one auto accepts, and the run trains.
TEST(Sweep, ABudgetThePlanAdvisesAtASettingsPeakIsOneAutoAccepts) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: imagenet}
data: {source: synthetic, synthetic_train_size: 256, synthetic_test_size: 64}
training: {device: cpu, threads: 1}
sweep: {batch_sizes: [32], checkpointing: [true], precisions: [fp32], memory_formats: [contiguous],
        warmup_steps: 1, measure_steps: 1}
)");
  ASSERT_EQ(training::run_sweep({config.string(), {}, (dir / "out").string(), TRAIN_BINARY, ""}),
            0);
  const int64_t peak =
      read_json(dir / "out/sweep.json").at("trials").at(0).at("peak_reserved_bytes");
  const auto plan = training::make_plan(dir / "out", peak + 1, 0.0, int64_t{1});
  ASSERT_TRUE(plan.chosen);
  const std::string flags = training::recommended_flags(plan, plan.candidates.at(*plan.chosen));
  ASSERT_NE(flags.find("checkpointing.budget=" + training::byte_size_text(peak)), std::string::npos)
      << flags;
  EXPECT_EQ(
      training::run_process(train_args(dir, config, 2, flags), dir / "train.log", 600).exit_code, 0)
      << flags << "\n"
      << test_support::read_text(dir / "train.log");
}

// A trial of one step in all (--warmup-steps 0 --measure-steps 1) never held the momentum its
// first step makes, so find-max's answer ran out of memory at step 2 of training: it now gets a
// warm-up step, and its peak is a two-step trial's.
TEST(Sweep, AOneStepTrialStillHoldsTheMomentum) {
  const auto config = training::parse_config(
      "model: {arch: resnet18, stem: cifar}\ntraining: {device: cpu, batch_size: 8}\n", "test");
  const auto one = training::measure_trial(config, 0, 1);
  const auto two = training::measure_trial(config, 1, 1);
  ASSERT_EQ(one.status, training::TrialStatus::Ok) << one.message;
  EXPECT_EQ(one.steps, 2);
  EXPECT_EQ(one.peak_allocated_bytes, two.peak_allocated_bytes);
}

// A trial out of memory before a measured step completed has no step time, images/s or steady
// peak: nullopt (null in its JSON), not 0.0 and the first step's peak; read back the same.
TEST(Sweep, ATrialOutOfMemoryBeforeItsMeasuredStepsHasNoMeasuredFigures) {
  struct NoLimitAfter {  // the trial set memory.limit for this process: not for the next tests
    ~NoLimitAfter() { training::TrackingCpuAllocator::instance().set_limit(0); }
  } no_limit_after;
  const auto config = training::parse_config(
      "model: {arch: resnet18, stem: cifar}\ntraining: {device: cpu, batch_size: 8}\n"
      "memory: {limit: 1MiB}\n",
      "test");
  const auto r = training::measure_trial(config, 1, 1);
  ASSERT_EQ(r.status, training::TrialStatus::OutOfMemory) << r.message;
  EXPECT_FALSE(r.median_step_seconds);
  EXPECT_FALSE(r.images_per_second);
  EXPECT_FALSE(r.steady_peak_allocated_bytes);
  EXPECT_FALSE(r.steady_peak_reserved_bytes);
  const auto json = training::to_json(r);
  for (const char* key : {"median_step_seconds", "images_per_second", "steady_peak_allocated_bytes",
                          "steady_peak_reserved_bytes"}) {
    EXPECT_TRUE(json.at(key).is_null()) << key << ": " << json.dump();
  }
  const auto back = training::trial_from_json(nlohmann::json::parse(json.dump()));
  EXPECT_FALSE(back.images_per_second);
  EXPECT_FALSE(back.steady_peak_reserved_bytes);
}

// sweep.checkpointing auto: each trial chooses its blocks under the sweep's memory.limit less the
// headroom; a batch that nothing fits is out of memory, as any trial that does not fit.
// The limit is derived from this CPU's own measurement of batch 40 (peaks differ between CPUs'
// kernels): its budget halfway between the step with every block recomputed and the plain step.
// With data.device_resident on CUDA training holds both whole splits on the device: a trial holds
// splits of the run's sizes, counted from data.root (a sweep refuses the data missing before it
// starts, check_sweep); on the CPU they are host data and nothing is counted or read.
TEST(Sweep, ATrialOnCudaHoldsTheRunsResidentSplits) {
  test_support::TempDir dir;
  training::Config config;
  config.data.device_resident = true;
  config.data.dataset.source(data::Source::Synthetic)
      .synthetic_train_size(900)
      .synthetic_test_size(70);
  const torch::Device cuda(torch::kCUDA, 0), cpu(torch::kCPU);  // no GPU needed: sizes only
  const data::SplitSizes held = training::resident_splits(config, cuda);
  EXPECT_EQ(held.train, 900);
  EXPECT_EQ(held.test, 70);
  config.data.dataset.train_limit(500);
  EXPECT_EQ(training::resident_splits(config, cuda).train, 500);
  EXPECT_EQ(training::resident_splits(config, cpu).train, 0);
  config.data.dataset.source(data::Source::Auto).root((dir / "none").string());
  EXPECT_EQ(training::resident_splits(config, cpu).test, 0);  // the CPU reads nothing
  try {
    training::resident_splits(config, cuda);
    ADD_FAILURE() << "the data missing was not refused";
  } catch (const data::DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "data.device_resident: a trial on CUDA holds both splits, counted: ", 0),
              0u)
        << e.what();
  }
  config.data.device_resident = false;
  EXPECT_EQ(training::resident_splits(config, cuda).train, 0);
}

TEST(Sweep, AutoCheckpointingTrialsChooseTheirBlocksUnderTheSweepsLimit) {
  test_support::TempDir dir;
  const std::string yaml = R"(
model: {arch: resnet18, stem: cifar}
training: {device: cpu, memory_format: contiguous}
sweep: {batch_sizes: [40, 256], checkpointing: [auto], warmup_steps: 0, measure_steps: 1}
)";
  auto at40 = training::load_config(write_config(dir, yaml).string(),
                                    {"training.batch_size=40", "checkpointing.enabled=auto"});
  const torch::Device cpu(torch::kCPU);
  const auto all = training::choose_blocks(training::measure_blocks(at40, cpu), int64_t{1} << 50);
  ASSERT_LT(all.smallest_peak, all.plain_peak);
  const int64_t beside = training::held_beside_step(at40, cpu, data::make_synthetic(80, 0), 0);
  const int64_t budget = (all.smallest_peak + all.plain_peak) / 2;
  const auto limit = static_cast<int64_t>(static_cast<double>(budget + beside) / 0.9);
  const auto config = write_config(dir, yaml + "memory: {limit: " + std::to_string(limit) + "B}\n");
  ASSERT_EQ(training::run_sweep({config.string(), {}, (dir / "out").string(), TRAIN_BINARY, ""}),
            0);
  const auto trials = read_json(dir / "out" / "sweep.json").at("trials");
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].at("checkpointing"), "auto");
  EXPECT_EQ(trials[0].at("status"), "ok") << trials[0].dump();
  const auto blocks = trials[0].at("recomputed_blocks").get<std::vector<std::string>>();
  EXPECT_FALSE(blocks.empty());  // batch 40 does not fit its budget without recomputing some
  EXPECT_LT(blocks.size(), 8u);
  EXPECT_LE(trials[0].at("predicted_peak_bytes").get<int64_t>(), budget);
  EXPECT_LE(trials[0].at("peak_allocated_bytes").get<int64_t>(), limit);
  EXPECT_EQ(trials[1].at("status"), "oom") << trials[1].dump();
  EXPECT_NE(trials[1].at("message").get<std::string>().find("with every block recomputed"),
            std::string::npos);
  // Its choice ran out of memory: nothing chosen, null (it wrote [] and 0, "auto chose none"), and
  // sweep.csv's cells empty.
  EXPECT_TRUE(trials[1].at("recomputed_blocks").is_null()) << trials[1].dump();
  EXPECT_TRUE(trials[1].at("predicted_peak_bytes").is_null()) << trials[1].dump();
  const std::string csv = test_support::read_text(dir / "out" / "sweep.csv");
  const std::string row2 = csv.substr(csv.find("\n2,"));
  const std::string host = trials[1].at("host").get<std::string>();
  EXPECT_NE(row2.find(",,," + host + ","), std::string::npos) << row2;
  EXPECT_EQ(row2.find("[]"), std::string::npos) << row2;
  EXPECT_NE(test_support::read_text(dir / "out" / "sweep.md")
                .find("| auto (" + std::to_string(blocks.size()) + " blocks recomputed) |"),
            std::string::npos);
  // Auto cells get no memory fit by design (their blocks change with the batch): said so, not
  // "needs two batch sizes" (issue 39, section 7).
  EXPECT_NE(test_support::read_text(dir / "out" / "sweep.md")
                .find("none for auto (its recomputed blocks change with the batch)"),
            std::string::npos);
  EXPECT_NE(training::plan_table(training::make_plan(dir / "out", 4LL << 30, 0.1, std::nullopt))
                .find("- (no fit for auto: its recomputed blocks change with the batch)"),
            std::string::npos);
  // Without a limit or a budget, the CPU gives auto nothing to choose for: refused up front.
  EXPECT_THROW(
      training::run_sweep(
          {config.string(), {"memory.limit=none"}, (dir / "refused").string(), TRAIN_BINARY, ""}),
      training::UserError);
  EXPECT_FALSE(fs::exists(dir / "refused"));
}

// sweep.data_parallel with sweep.checkpointing: each trial holds one rank's reducer and its
// gradient buckets (about the parameters' size more than a single process), and checkpointing
// lowers that rank's peak. Under WORLD_SIZE > 1 a sweep is refused: its trials are one process.
TEST(Sweep, DataParallelTrialsHoldTheReducersBucketsAndCombineWithCheckpointing) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: cifar}
training: {device: cpu}
sweep: {batch_sizes: [8], checkpointing: [false, true], warmup_steps: 1, measure_steps: 1}
)");
  auto peaks = [&](const std::string& name, const std::string& data_parallel) {
    EXPECT_EQ(training::run_sweep({config.string(),
                                   {"sweep.data_parallel=" + data_parallel},
                                   (dir / name).string(),
                                   TRAIN_BINARY,
                                   ""}),
              0);
    const auto sweep = read_json(dir / name / "sweep.json");
    EXPECT_EQ(sweep.at("data_parallel").get<bool>(), data_parallel == "true");
    std::map<bool, int64_t> peak;  // checkpointing -> peak allocated
    for (const auto& trial : sweep.at("trials")) {
      EXPECT_EQ(trial.at("status"), "ok") << trial.dump();
      peak[trial.at("checkpointing").get<bool>()] = trial.at("peak_allocated_bytes").get<int64_t>();
    }
    return peak;
  };
  const auto alone = peaks("alone", "false");
  const auto rank = peaks("rank", "true");
  int64_t parameter_bytes = 0;
  for (const auto& p :
       models::ResNet(models::ResNetOptions(18).stem(models::Stem::Cifar))->parameters()) {
    parameter_bytes += p.numel() * p.element_size();
  }
  for (const bool checkpointing : {false, true}) {
    EXPECT_GT(rank.at(checkpointing), alone.at(checkpointing) + parameter_bytes / 2)
        << "checkpointing " << checkpointing;
  }
  EXPECT_LT(rank.at(true), rank.at(false));
  EXPECT_NE(test_support::read_text(dir / "rank/sweep.md").find("sweep.data_parallel"),
            std::string::npos);

  // A data-parallel step is not captured: with training.cuda_graph: on, refused in one line.
  try {
    training::run_sweep({config.string(),
                         {"sweep.data_parallel=true", "training.cuda_graph=on"},
                         (dir / "graphed").string(),
                         TRAIN_BINARY,
                         ""});
    ADD_FAILURE() << "expected a UserError";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "sweep.data_parallel: true is not combined with training.cuda_graph: on"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "graphed"));

  // Each trial joins a one-rank group: a backend this device cannot use was refused in every
  // trial (hostile pass 5); it is refused before the folder exists, as train refuses it.
  try {
    training::run_sweep({config.string(),
                         {"sweep.data_parallel=true", "distributed.backend=nccl"},
                         (dir / "nccl").string(),
                         TRAIN_BINARY,
                         ""});
    ADD_FAILURE() << "expected a UserError";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("distributed.backend: nccl "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("; set it to gloo"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "nccl"));

  struct LaunchVariables {  // set for this case only, whatever it throws
    LaunchVariables() {
      setenv("WORLD_SIZE", "2", 1);  // alone: the sweep's refusal, not "needs RANK too"
    }
    ~LaunchVariables() {
      unsetenv("WORLD_SIZE");
      unsetenv("RANK");
      unsetenv("MASTER_PORT");
    }
  } launched;
  try {
    training::run_sweep({config.string(), {}, (dir / "refused").string(), TRAIN_BINARY, ""});
    ADD_FAILURE() << "expected a UserError";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("WORLD_SIZE=2: train sweep runs its trials one process "
                                         "at a time"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "refused"));
}

// A stop while the plots are drawn, after the last trial, was swallowed: the plot was killed and
// the sweep exited 0 as if nothing had happened. Now it exits 130 with its tables complete, and
// says how to draw the plots.
TEST(Sweep, AStopWhileThePlotsAreDrawnExitsAsAStop) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: cifar}
training: {device: cpu}
sweep: {batch_sizes: [2], precisions: [fp32], warmup_steps: 0, measure_steps: 1}
)");
  const int code = sweep_stopped_at("sweep plots", config, dir / "out");
  EXPECT_EQ(code, training::kExitStopped);
  const auto sweep = read_json(dir / "out/sweep.json");
  EXPECT_TRUE(sweep.at("complete").get<bool>());
  EXPECT_EQ(sweep.at("trials").at(0).at("status"), "ok");
  EXPECT_FALSE(fs::exists(dir / "out/plot.log"));  // not started once the stop had come
}

TEST(Sweep, ACrashingTrialIsRecordedAndTheSweepGoesOn) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: imagenet}
training: {device: cpu}
sweep: {batch_sizes: [8, 16, 24], warmup_steps: 0, measure_steps: 1}
)");
  // A stand-in for `train` whose trial at batch 16 dies of a segmentation fault.
  const auto crashing = dir / "crashing-train.sh";
  std::ofstream(crashing)
      << "#!/bin/sh\n"
         "if grep -q 'batch_size: 16$' \"$3\"; then echo 'about to crash'; kill -SEGV $$; fi\n"
         "exec '" TRAIN_BINARY "' \"$@\"\n";
  fs::permissions(crashing, fs::perms::owner_all);
  training::SweepRequest request{config.string(), {}, (dir / "out").string(), crashing, ""};
  ASSERT_EQ(training::run_sweep(request), 0);
  const auto trials = read_json(dir / "out/sweep.json").at("trials");
  ASSERT_EQ(trials.size(), 3u);
  EXPECT_EQ(trials[0].at("status"), "ok");
  EXPECT_EQ(trials[1].at("status"), "error");
  EXPECT_EQ(trials[1].at("message"),
            "trial process killed by signal 11 (Segmentation fault): about to crash");
  EXPECT_EQ(trials[2].at("status"), "ok");
}

// The stand-ins' result: trial `$status` (ok, oom) at batch `$b`, 1000 bytes an image.
const char* const kStandInResult =
    "printf '{\"status\":\"%s\",\"message\":\"\",\"peak_allocated_bytes\":%d,"
    "\"peak_reserved_bytes\":%d,\"steady_peak_allocated_bytes\":%d,"
    "\"steady_peak_reserved_bytes\":%d,\"median_step_seconds\":0.1,"
    "\"images_per_second\":%d,\"steps\":1,\"replayed_steps\":0,"
    "\"outside_allocator_bytes\":0,\"recomputed_blocks\":null,"
    "\"predicted_peak_bytes\":0}\\n' $status $((b*1000)) $((b*1000)) "
    "$((b*1000)) $((b*1000)) $((b*10)) > \"$5\"\n";

// A stand-in for `train sweep-trial`: `prelude` (shell, `$b` the trial's batch) may end the trial;
// otherwise it writes an ok result whose peak is 1000 bytes an image.
fs::path fake_train(const test_support::TempDir& dir, const std::string& name,
                    const std::string& prelude) {
  const auto fake = dir / (name + ".sh");
  std::ofstream(fake) << "#!/bin/sh\n"
                         "b=$(grep -E '^  batch_size: ' \"$3\" | awk '{print $2}')\n"
                      << prelude
                      << "\n"
                         "status=ok\n"
                      << kStandInResult;
  fs::permissions(fake, fs::perms::owner_all);
  return fake;
}

// A trial the user stopped is no result, however the stop reached it: a Ctrl-C reaches the whole
// process group, and the trial may exit 130 (or die of the signal, before its handlers) before
// the sweep has seen its own. The sweep stops (exit 130, complete: false, no row for the trial)
// and can be finished on its folder.
TEST(Sweep, ATrialStoppedByASignalIsNoResultAndTheSweepCanBeFinished) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
training: {device: cpu}
sweep: {batch_sizes: [8, 16, 24]}
)");
  const std::vector<std::string> stops = {"exit 130", "kill -TERM $$", "kill -INT $$"};
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& stop = stops[i];
    const auto out = dir / ("out" + std::to_string(i));
    const auto stopped = fake_train(dir, "stopped", "if [ \"$b\" = 16 ]; then " + stop + "; fi");
    EXPECT_EQ(training::run_sweep({config.string(), {}, out.string(), stopped, ""}),
              training::kExitStopped)
        << stop;
    const auto sweep = read_json(out / "sweep.json");
    EXPECT_FALSE(sweep.at("complete").get<bool>()) << stop;
    ASSERT_EQ(sweep.at("trials").size(), 1u) << stop << ": " << sweep.at("trials").dump();
    EXPECT_EQ(sweep.at("trials")[0].at("status"), "ok");
    const std::string md = test_support::read_text(out / "sweep.md");
    EXPECT_NE(md.find("**Not complete** (`complete: false` in sweep.json): stopped by a signal "
                      "after 1 trial(s)"),
              std::string::npos)
        << md;
    EXPECT_NE(md.find("Plots, where drawn (after the last trial; not after a stop)"),
              std::string::npos);
    const auto plain = fake_train(dir, "plain", "");
    ASSERT_EQ(training::run_sweep({config.string(), {}, out.string(), plain, ""}), 0) << stop;
    const auto finished = read_json(out / "sweep.json");
    EXPECT_TRUE(finished.at("complete").get<bool>());
    EXPECT_EQ(finished.at("trials").size(), 3u);
  }
}

// A sweep stopped at any moment and run again on its folder gives the rows an unstopped sweep gives
// (issue 57): stops as trial 1 and as trial 2 start (the trial's own process is signalled), each
// finished by the same command; the real binary, so that the peaks are measured.
TEST(Sweep, AStoppedSweepRunAgainGivesTheRowsOfOneNeverStopped) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: cifar}
training: {device: cpu}
sweep: {batch_sizes: [2, 4], precisions: [fp32], warmup_steps: 0, measure_steps: 1}
)");
  auto rows = [](const fs::path& out) {
    const auto sweep = read_json(out / "sweep.json");
    std::vector<std::string> rows;
    for (const auto& t : sweep.at("trials")) {
      rows.push_back(nlohmann::json{t.at("trial"), t.at("batch_size"), t.at("status"),
                                    t.at("peak_allocated_bytes"), t.at("peak_reserved_bytes"),
                                    t.at("steady_peak_allocated_bytes")}
                         .dump());
    }
    return rows;
  };
  const auto unstopped = dir / "unstopped";
  ASSERT_EQ(training::run_sweep({config.string(), {}, unstopped.string(), TRAIN_BINARY, ""}), 0);
  ASSERT_EQ(rows(unstopped).size(), 2u);
  for (const std::string moment : {"sweep trial 1", "sweep trial 2"}) {
    const auto out = dir / ("stopped at " + moment);
    const int code = sweep_stopped_at(moment, config, out);
    ASSERT_EQ(code, training::kExitStopped) << moment;
    EXPECT_FALSE(read_json(out / "sweep.json").at("complete").get<bool>()) << moment;
    ASSERT_EQ(training::run_sweep({config.string(), {}, out.string(), TRAIN_BINARY, ""}), 0)
        << moment;
    EXPECT_TRUE(read_json(out / "sweep.json").at("complete").get<bool>()) << moment;
    EXPECT_EQ(rows(out), rows(unstopped)) << moment;
  }
}

// Advice is only what `train` accepts (issue 57): a largest batch above the config's training set
// (synthetic 128 images) gets no flags `train` would refuse, in sweep.md; one within it does.
TEST(Sweep, NoFlagsAreAdvisedForABatchTheConfigsTrainingSetCannotFill) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
data: {source: synthetic, synthetic_train_size: 128}
training: {device: cpu}
sweep: {batch_sizes: [64, 200]}
)");
  ASSERT_EQ(training::run_sweep(
                {config.string(), {}, (dir / "out").string(), fake_train(dir, "plain", ""), ""}),
            0);
  const std::string md = test_support::read_text(dir / "out" / "sweep.md");
  EXPECT_NE(md.find("- fp32 / checkpointing off / contiguous: batch 200 is more than the 128 "
                    "training images of the sweep's config, which train refuses "
                    "(training.batch_size)"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("--set training.batch_size=200"), std::string::npos) << md;
  EXPECT_EQ(training::untrainable_batch(128, 1, 128), "");
  EXPECT_EQ(training::untrainable_batch(129, 1, 0), "");  // not known: flags as before
  // Thirteenth pass: a step is its micro-batches' images (16 x 16 of 128 was advised as flags).
  EXPECT_EQ(training::untrainable_batch(16, 16, 128),
            "batch 16 in 16 micro-batches (256 images a step) is more than the 128 training "
            "images of the sweep's config, which train refuses (training.accumulate_steps)");
  EXPECT_EQ(training::untrainable_batch(16, 8, 128), "");
}

// A result belongs to the trial run that wrote it: started again on a stopped sweep's folder with
// other batches, a trial that writes nothing is an error (it read the earlier run's trials/001.json
// as its own: ok, with batch 8's peak), its message quotes its own log, and the folder holds this
// run's files only (no earlier trial, no temporary of a write killed mid-rename).
TEST(Sweep, AResultIsReadOnlyFromTheTrialRunThatWroteIt) {
  test_support::TempDir dir;
  const auto first =
      write_config(dir, "training: {device: cpu}\nsweep: {batch_sizes: [8, 16, 24]}\n");
  const auto out = dir / "out";
  const auto stopped = fake_train(dir, "stopped", "if [ \"$b\" = 16 ]; then exit 130; fi");
  ASSERT_EQ(training::run_sweep({first.string(), {}, out.string(), stopped, ""}),
            training::kExitStopped);
  ASSERT_TRUE(fs::exists(out / "trials/001.json"));
  std::ofstream(out / ".sweep.csv.tmp123") << "half";
  std::ofstream(out / "trials/.003.yaml.tmp456") << "half";
  std::ofstream(out / "trials/005.json") << "{}";
  std::ofstream(dir / "second.yaml") << "training: {device: cpu}\nsweep: {batch_sizes: [32, 40]}\n";
  const auto crashing =
      fake_train(dir, "crashing", "if [ \"$b\" = 32 ]; then echo 'crashed at 32'; exit 1; fi");
  ASSERT_EQ(training::run_sweep({(dir / "second.yaml").string(), {}, out.string(), crashing, ""}),
            0);
  const auto trials = read_json(out / "sweep.json").at("trials");
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].at("batch_size"), 32);
  EXPECT_EQ(trials[0].at("status"), "error") << trials[0].dump();
  EXPECT_EQ(trials[0].at("message"), "trial process exit code 1: crashed at 32");
  EXPECT_EQ(trials[1].at("peak_allocated_bytes"), 40000);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(out / "trials")) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"001.log", "001.yaml", "002.json", "002.log", "002.yaml"}));
  EXPECT_FALSE(fs::exists(out / ".sweep.csv.tmp123"));
}

// What is read back is input: sweep.json is checked as the sweep wrote it. A trial's batch of 0
// was planned as "batch 0", and divided `train plan --target-batch` (SIGFPE).
TEST(Sweep, ASweepReadBackIsCheckedAsItWasWritten) {
  test_support::TempDir dir;
  const auto config = write_config(dir, "training: {device: cpu}\nsweep: {batch_sizes: [8]}\n");
  ASSERT_EQ(training::run_sweep(
                {config.string(), {}, (dir / "out").string(), fake_train(dir, "plain", ""), ""}),
            0);
  const auto written = read_json(dir / "out/sweep.json");
  auto refusal = [&](const char* key, const nlohmann::json& value) {
    auto edited = written;
    edited["trials"][0][key] = value;
    std::ofstream(dir / "out/sweep.json") << edited.dump();
    try {
      training::make_plan(dir / "out", int64_t{1} << 30, 0.1, int64_t{0}, std::nullopt, 16);
    } catch (const training::UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal("batch_size", 0)
                .find("sweep.json: not a sweep written by `train sweep`: "
                      "trials[0].batch_size: 0 is not within [1, 1048576]"),
            std::string::npos)
      << refusal("batch_size", 0);
  EXPECT_NE(refusal("peak_reserved_bytes", -5)
                .find("trials[0].peak_reserved_bytes: -5 is not within [0, 1125899906842624]"),
            std::string::npos);
  EXPECT_NE(refusal("status", "maybe").find("trials[0].status: 'maybe' is not ok, oom or error"),
            std::string::npos);
  EXPECT_NE(refusal("batch_size", 8.5).find("trials[0].batch_size: 8.5 is not a whole number"),
            std::string::npos);
  // No peak above the largest card: a plan's sums of peaks cannot overflow.
  EXPECT_NE(refusal("peak_allocated_bytes", INT64_MAX)
                .find("trials[0].peak_allocated_bytes: 9223372036854775807 is not within [0, "
                      "1125899906842624]"),
            std::string::npos);
  EXPECT_NE(refusal("trial", 2).find("trials[0].trial: 2 is not within [1, 1]"),
            std::string::npos);  // numbered in order
  EXPECT_NE(
      refusal("precision", "fp7").find("trials[0].precision: 'fp7' is not fp32, bf16 or fp16"),
      std::string::npos);  // it said "trials[0].unknown setting fp7 / contiguous"
  EXPECT_EQ(refusal("batch_size", 8), "accepted");
}

// Round 3: find-max after a crashed trial. A stand-in for `train` whose memory ends above batch 40
// and whose trial at batch 32 crashes once (then the search retries it and finds 40) or every
// time (then the sweep is not complete: it had stopped there and said 16, complete: true).
TEST(Sweep, FindMaxRetriesACrashedTrialOnceAndIsIncompleteWhenItFailsAgain) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
training: {device: cpu}
memory: {limit: 1GiB}
sweep: {batch_sizes: [8], find_max: true, max_batch: 64}
)");
  auto sweep_with = [&](const std::string& name, const std::string& crash) {
    const auto fake = dir / (name + ".sh");
    std::ofstream(fake) << "#!/bin/sh\n"
                           "b=$(grep -E '^  batch_size: ' \"$3\" | awk '{print $2}')\n"
                           "if [ \"$b\" = 32 ] && "
                        << crash
                        << "; then kill -SEGV $$; fi\n"
                           "status=ok; code=0; if [ \"$b\" -gt 40 ]; then status=oom; code=3; fi\n"
                        << kStandInResult << "exit $code\n";
    fs::permissions(fake, fs::perms::owner_all);
    EXPECT_EQ(training::run_sweep({config.string(), {}, (dir / name).string(), fake, ""}), 0);
    return read_json(dir / name / "sweep.json");
  };
  const auto once = sweep_with(
      "once", "[ ! -e " + (dir / "crashed").string() + " ] && touch " + (dir / "crashed").string());
  EXPECT_TRUE(once.at("complete").get<bool>());
  EXPECT_EQ(once.at("cells").at(0).at("largest_fitting_batch"), 40);
  const auto always = sweep_with("always", "true");
  EXPECT_FALSE(always.at("complete").get<bool>());
  int64_t crashed = 0;
  for (const auto& trial : always.at("trials")) crashed += trial.at("status") == "error";
  EXPECT_EQ(crashed, 2);  // tried once more
  // train plan says that it chooses among what was measured.
  const auto plan = training::make_plan(dir / "always", int64_t{1} << 30, 0.1, int64_t{0});
  EXPECT_NE(training::plan_table(plan).find("The sweep did not complete"), std::string::npos);
}

// A batch that does not train is no answer: where a BatchNorm sees one value per channel at batch
// 1 (ResNet's ImageNet stem at 32x32: layer4 is 1x1), find-max never probes 1 (its trial failed as
// LibTorch does, twice, and the sweep said complete: false), and when 2 is out of memory no batch
// fits. With the CIFAR stem (4x4) batch 1 trains and is the answer. A stand-in for `train` runs
// out of memory above batch 1 and refuses batch 1 where LibTorch would.
TEST(Sweep, FindMaxNeverAnswersABatchThatDoesNotTrain) {
  test_support::TempDir dir;
  const auto stand_in = dir / "train.sh";
  std::ofstream(stand_in) << "#!/bin/sh\n"
                             "b=$(grep -E '^  batch_size: ' \"$3\" | awk '{print $2}')\n"
                             "status=ok; code=0; if [ \"$b\" -gt 1 ]; then status=oom; code=3; fi\n"
                             "if [ \"$b\" = 1 ] && grep -q 'stem: imagenet' \"$3\"; then\n"
                             "  echo 'Expected more than 1 value per channel when training' >&2; "
                             "exit 1; fi\n"
                          << kStandInResult << "exit $code\n";
  fs::permissions(stand_in, fs::perms::owner_all);
  for (const std::string stem : {"imagenet", "cifar"}) {
    const auto config = write_config(dir, "model: {arch: resnet18, stem: " + stem +
                                              "}\ntraining: {device: cpu}\nmemory: {limit: 1GiB}\n"
                                              "sweep: {batch_sizes: [8], find_max: true}\n");
    ASSERT_EQ(training::run_sweep({config.string(), {}, (dir / stem).string(), stand_in, ""}), 0);
    const auto sweep = read_json(dir / stem / "sweep.json");
    EXPECT_TRUE(sweep.at("complete").get<bool>()) << stem;
    std::vector<int64_t> probed;
    for (const auto& trial : sweep.at("trials")) probed.push_back(trial.at("batch_size"));
    const auto& cell = sweep.at("cells").at(0);
    if (stem == "imagenet") {
      EXPECT_EQ(probed, (std::vector<int64_t>{8, 4, 2}));
      EXPECT_TRUE(cell.at("largest_fitting_batch").is_null()) << cell.dump();
    } else {
      EXPECT_EQ(probed, (std::vector<int64_t>{8, 4, 2, 1}));
      EXPECT_EQ(cell.at("largest_fitting_batch"), 1) << cell.dump();
    }
  }
}

// sweep.batch_sizes and training.batch_size: a batch that does not train the model is refused
// before anything runs, naming the key (config_test has the message).
TEST(Sweep, ABatchThatDoesNotTrainIsRefusedBeforeAnyTrial) {
  test_support::TempDir dir;
  const auto config = write_config(dir,
                                   "model: {arch: resnet18, stem: imagenet}\ntraining: {device: "
                                   "cpu}\nsweep: {batch_sizes: [1, 8]}\n");
  try {
    training::run_sweep({config.string(), {}, (dir / "out").string(), TRAIN_BINARY, ""});
    ADD_FAILURE() << "batch 1 was swept";
  } catch (const training::ConfigError& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind(config.string() + ": sweep.batch_sizes: 1 does not train: ", 0),
        0u)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// Thirteenth pass: memory.snapshot was taken and nothing recorded (exit 0); a limit below what
// bf16 holds whatever the batch (its autocast copies) ran every trial out of memory. Refused before
// the folder, judged per precision: a grid with a precision that fits runs.
TEST(Sweep, WhatNoTrialCanDoIsRefusedBeforeItsFolder) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
training: {device: cpu}
sweep: {batch_sizes: [8], precisions: [bf16]}
)");
  const auto out = dir / "out";
  auto request = [&](const std::string& sets) {
    training::SweepRequest r{config.string(), {}, out.string(), TRAIN_BINARY, ""};
    r.overrides = {sets};
    return r;
  };
  try {
    training::run_sweep(request("memory.snapshot=true"));
    ADD_FAILURE() << "memory.snapshot was taken by a sweep";
  } catch (const training::ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("memory.snapshot: true is not recorded by a sweep's trials"),
        std::string::npos)
        << e.what();
  }
  training::Config with_fp32 =
      training::parse_config(test_support::read_text(config), config.string());
  with_fp32.training.precision = training::Precision::FP32;
  const int64_t fp32_held = training::held_whatever_the_batch(with_fp32).bytes;
  const std::string between =
      "memory.limit=" + std::to_string(fp32_held + 2 * training::kMiB) + "B";
  try {
    training::run_sweep(request(between));
    ADD_FAILURE() << "a bf16 sweep below its weights' copies was run";
  } catch (const training::OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("autocast's bf16 copies of them alone take"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(", --precisions fp32 or a smaller model.arch"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  with_fp32.memory.limit = fp32_held + 2 * training::kMiB;
  with_fp32.sweep.precisions = {training::Precision::BF16, training::Precision::FP32};
  EXPECT_NO_THROW(training::check_sweep(with_fp32, torch::kCPU));
}

// Sixteenth pass: a config's checkpointing.enabled: auto, which no cell of the grid runs (each
// takes sweep.checkpointing's mode), was refused for its budget on the CPU ("set memory.limit
// (--memory-limit 2GiB)", which train plan does not take, and which would have made the sweep's
// device a 2 GiB one). Only a grid that holds auto needs one.
TEST(Sweep, AConfigsCheckpointingAutoNeedsNoBudgetWhereNoCellRunsIt) {
  training::Config config;
  config.model.depth(18);
  config.checkpointing.mode(training::CheckpointMode::Auto);
  config.sweep.checkpointing = {training::CheckpointMode::Off, training::CheckpointMode::On};
  EXPECT_NO_THROW(training::check_sweep(config, torch::kCPU));
  config.sweep.checkpointing = {training::CheckpointMode::Auto};
  try {
    training::check_sweep(config, torch::kCPU);
    ADD_FAILURE() << "an auto cell without a budget on the CPU was let through";
  } catch (const training::KeyError& e) {
    EXPECT_NE(std::string(e.what()).find("sweep.checkpointing"), std::string::npos) << e.what();
    // The advice is a flag every command takes (train plan has no --memory-limit).
    EXPECT_NE(std::string(e.what()).find("--set memory.limit=2GiB"), std::string::npos) << e.what();
  }
}

// The sweep's predicted largest batch per memory size is none where it would be a batch that does
// not train.
TEST(Sweep, APredictedLargestBatchIsOneThatTrains) {
  const training::Setting cell{};
  std::vector<training::SweepTrial> trials;
  for (const int64_t batch : {2, 4}) {
    training::SweepTrial t;
    t.setting = cell;
    t.batch = batch;
    t.result.status = training::TrialStatus::Ok;
    t.result.peak_reserved_bytes = 1000 + 100 * batch;  // 1 fits in 1150 bytes, 2 does not
    trials.push_back(t);
  }
  EXPECT_EQ(training::summarize({cell}, trials, {1150}, false, 1).at(0).predictions.at(0).second,
            1);
  EXPECT_EQ(training::summarize({cell}, trials, {1150}, false, 2).at(0).predictions.at(0).second,
            0);
  EXPECT_EQ(training::summarize({cell}, trials, {1250}, false, 2).at(0).predictions.at(0).second,
            2);
}

TEST(Sweep, ATrialPastItsTimeoutIsKilledAndRecorded) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
training: {device: cpu}
sweep: {batch_sizes: [8], trial_timeout: 1}
)");
  const auto sleepy = dir / "sleepy-train.sh";
  std::ofstream(sleepy) << "#!/bin/sh\nsleep 30\n";
  fs::permissions(sleepy, fs::perms::owner_all);
  training::run_sweep({config.string(), {}, (dir / "out").string(), sleepy, ""});
  const auto trial = read_json(dir / "out/sweep.json").at("trials").at(0);
  EXPECT_EQ(trial.at("status"), "error");
  EXPECT_EQ(trial.at("message").get<std::string>().rfind("trial process timed out after 1 s", 0),
            0u);
}

// sweep.time_budget: once spent, no new trial starts; the grid runs batch by batch across the
// settings, so the second trial is the second setting's smallest batch. (Each trial here is a
// script killed by its 1 s timeout, so each takes at least the 1 s of the budget's measure.)
TEST(Sweep, NoTrialStartsOnceTheTimeBudgetIsSpent) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
training: {device: cpu}
sweep: {batch_sizes: [8, 16], checkpointing: [false, true], trial_timeout: 1, time_budget: 2}
)");
  const auto sleepy = dir / "sleepy-train.sh";
  std::ofstream(sleepy) << "#!/bin/sh\nsleep 30\n";
  fs::permissions(sleepy, fs::perms::owner_all);
  ASSERT_EQ(training::run_sweep({config.string(), {}, (dir / "out").string(), sleepy, ""}), 0);
  const auto sweep = read_json(dir / "out/sweep.json");
  EXPECT_FALSE(sweep.at("complete").get<bool>());
  const auto& trials = sweep.at("trials");
  ASSERT_GE(trials.size(), 1u);
  ASSERT_LE(trials.size(), 2u);  // 2 s of budget, at least 1 s per trial
  EXPECT_EQ(trials[0].at("batch_size"), 8);
  if (trials.size() == 2) {
    EXPECT_EQ(trials[1].at("batch_size"), 8);
    EXPECT_TRUE(trials[1].at("checkpointing").get<bool>());
  }
  EXPECT_FALSE(fs::exists(dir / "out/trials/003.yaml"));
}

TEST(Sweep, FindMaxOnTheCpuNeedsALimit) {
  test_support::TempDir dir;
  const auto config = write_config(dir, "training: {device: cpu}\nsweep: {find_max: true}\n");
  try {
    training::run_sweep({config.string(), {}, (dir / "out").string(), TRAIN_BINARY, ""});
    FAIL();
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("sweep.find_max: on the CPU there is no device memory"),
              std::string::npos);
  }
  EXPECT_FALSE(fs::exists(dir / "out"));  // refused before anything ran
}

training::SweepTrial trial(int64_t batch, training::TrialStatus status, int64_t peak, double ips,
                           bool checkpointing = false) {
  training::SweepTrial t;
  t.setting.checkpointing =
      checkpointing ? training::CheckpointMode::On : training::CheckpointMode::Off;
  t.batch = batch;
  t.result.status = status;
  t.result.peak_reserved_bytes = peak;
  t.result.images_per_second = ips;
  return t;
}

TEST(Summarize, FindsLargestFittingFastestAndFitsPerCell) {
  constexpr auto Ok = training::TrialStatus::Ok;
  constexpr auto OutOfMemory = training::TrialStatus::OutOfMemory;
  constexpr auto Error = training::TrialStatus::Error;
  const std::vector<training::Setting> cells = {
      {}, {training::Precision::FP32, training::CheckpointMode::On}};
  const std::vector<training::SweepTrial> trials = {
      trial(8, Ok, 180, 100), trial(16, Ok, 260, 150), trial(32, OutOfMemory, 300, 0),
      trial(24, Ok, 340, 140), trial(8, Error, 0, 0, true)};
  const auto summaries = training::summarize(cells, trials, {500}, true);
  ASSERT_EQ(summaries.size(), 2u);
  const auto& plain = summaries[0];
  EXPECT_EQ(plain.largest_fitting, 24);
  EXPECT_EQ(plain.smallest_failing, 32);
  EXPECT_EQ(plain.fastest_batch, 16);
  EXPECT_DOUBLE_EQ(plain.fastest_images_per_second, 150);
  ASSERT_TRUE(plain.fit);
  EXPECT_NEAR(plain.fit->slope, 10, 1e-9);
  EXPECT_EQ(plain.predictions[0].second, 40);  // 100 + 10 * 40 = 500
  const auto& failed = summaries[1];
  EXPECT_FALSE(failed.largest_fitting);
  EXPECT_FALSE(failed.fit);
  EXPECT_FALSE(failed.predictions[0].second);
  // Hostile pass 8: sweep.json gave the cell measured nothing a fastest images/s of 0.0 beside
  // its null fastest batch: null, as its trials' unmeasured figures.
  test_support::TempDir dir;
  training::SweepFacts facts{"resnet18", "cifar", "cpu", "cpu", int64_t{2} << 30, true, 1, 1, {}};
  training::write_sweep_tables(dir.path(), facts, summaries, trials, true);
  const auto json = read_json(dir / "sweep.json").at("cells");
  EXPECT_EQ(json.at(0).at("fastest_images_per_second"), 150.0);
  EXPECT_TRUE(json.at(1).at("fastest_batch").is_null());
  EXPECT_TRUE(json.at(1).at("fastest_images_per_second").is_null()) << json.at(1).dump();
}

// Twelfth pass: sweep.md's predicted largest batch per memory size (5731 with 512 training
// images) said nothing of a batch train refuses, where plan's and memory's tables say it.
TEST(Summarize, APredictedBatchAboveTheTrainingSetIsSaidToBeRefused) {
  constexpr auto Ok = training::TrialStatus::Ok;
  const std::vector<training::Setting> cells = {{}};
  const std::vector<training::SweepTrial> trials = {trial(8, Ok, 180, 100),
                                                    trial(16, Ok, 260, 150)};
  const auto summaries = training::summarize(cells, trials, {500, 5000}, false);
  ASSERT_EQ(summaries[0].predictions[1].second, 490);  // 100 + 10 * 490 = 5000
  test_support::TempDir dir;
  training::SweepFacts facts{"resnet18", "cifar", "cpu", "cpu", 500, true, 1, 1, {500, 5000}};
  facts.train_images = 256;
  training::write_sweep_tables(dir.path(), facts, summaries, trials, true);
  const std::string md = test_support::read_text(dir / "sweep.md");
  EXPECT_NE(md.find("| 40 | 490 (more than the 256 training images, which train refuses) |"),
            std::string::npos)
      << md;
  // Thirteenth pass: in micro-batches, a step's images (20 x 2 of 32 was said to train).
  std::vector<training::Setting> accumulated = {{}};
  accumulated[0].accumulate_steps = 2;
  facts.train_images = 32;
  facts.memory_sizes = {500, 300};
  auto in_micro_batches = trials;
  for (auto& t : in_micro_batches) t.setting.accumulate_steps = 2;
  auto two = training::summarize(accumulated, in_micro_batches, {500, 300}, false);
  ASSERT_EQ(two[0].predictions[1].second, 20);
  training::write_sweep_tables(dir.path(), facts, two, in_micro_batches, true);
  const std::string in_two = test_support::read_text(dir / "sweep.md");
  EXPECT_NE(in_two.find("| 500 B | 300B |"), std::string::npos) << in_two;  // as --predict-for
  EXPECT_NE(in_two.find(" 20 (40 images a step: more than the 32 training images, which train "
                        "refuses) |"),
            std::string::npos)
      << in_two;
}

// Round 5: find-max stopped at sweep.max_batch gave that cap as "largest batch that fits" without
// a word: the search went no higher. Its answer is a lower bound, said as one in sweep.md and
// sweep.json; a search that found a failing batch above its answer is exact.
TEST(Summarize, AFindMaxStoppedAtMaxBatchSaysItsAnswerIsALowerBound) {
  constexpr auto Ok = training::TrialStatus::Ok;
  constexpr auto OutOfMemory = training::TrialStatus::OutOfMemory;
  const std::vector<training::Setting> cells = {
      {}, {training::Precision::FP32, training::CheckpointMode::On}};
  const std::vector<training::SweepTrial> trials = {
      trial(32, Ok, 300, 100), trial(64, Ok, 500, 120), trial(32, Ok, 200, 90, true),
      trial(48, Ok, 250, 95, true), trial(64, OutOfMemory, 0, 0, true)};
  const auto summaries = training::summarize(cells, trials, {}, true, 1, 64);
  test_support::TempDir dir;
  training::SweepFacts facts{"resnet18", "cifar", "cpu", "cpu", int64_t{2} << 30, true, 1, 1, {}};
  training::write_sweep_tables(dir.path(), facts, summaries, trials, true);
  const std::string md = test_support::read_text(dir / "sweep.md");
  EXPECT_NE(md.find("| fp32 / checkpointing off / contiguous | at least 64 (the search stops at "
                    "sweep.max_batch, 64) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| fp32 / checkpointing on / contiguous | 48 |"), std::string::npos) << md;
  const auto json = read_json(dir / "sweep.json").at("cells");
  EXPECT_TRUE(json.at(0).at("max_batch_reached").get<bool>()) << json.dump();
  EXPECT_FALSE(json.at(1).at("max_batch_reached").get<bool>()) << json.dump();
}

}  // namespace

// `--card`: every trial is predicted on that card beside what it measured; an unknown card is
// refused before the sweep's folder exists.
TEST(Sweep, ACardPredictsEachTrialBesideItsMeasurement) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: cifar}
training: {device: cpu, memory_format: contiguous}
sweep: {batch_sizes: [4, 8], warmup_steps: 0, measure_steps: 1}
)");
  training::SweepRequest refused{config.string(), {}, (dir / "bad").string(), TRAIN_BINARY, "T5"};
  EXPECT_THROW(training::run_sweep(refused), training::UserError);
  EXPECT_FALSE(fs::exists(dir / "bad"));
  training::SweepRequest request{config.string(), {}, (dir / "out").string(), TRAIN_BINARY, "T4"};
  ASSERT_EQ(training::run_sweep(request), 0);
  const auto sweep = read_json(dir / "out/sweep.json");
  ASSERT_EQ(sweep.at("trials").size(), 2u);
  int64_t previous = 0;
  for (const auto& trial : sweep.at("trials")) {
    EXPECT_EQ(trial.at("card"), "T4");
    EXPECT_TRUE(trial.at("fits_on_card").get<bool>());
    const int64_t allocated = trial.at("predicted_allocated_peak_bytes").get<int64_t>();
    EXPECT_GE(trial.at("predicted_reserved_peak_bytes").get<int64_t>(), allocated);
    // Batch 8 holds more than batch 4 (the reserved peak need not grow: how the allocator's
    // segments fragment changes with the sizes).
    EXPECT_GT(allocated, previous);
    previous = allocated;
  }
  const std::string md = test_support::read_text(dir / "out/sweep.md");
  EXPECT_NE(md.find("## Predicted on T4"), std::string::npos) << md;
  EXPECT_NE(md.find("model, options the defaults;"), std::string::npos) << md;
  EXPECT_EQ(sweep.at("trials")[0].at("allocator_options"), "");
  EXPECT_NE(test_support::read_text(dir / "out/sweep.csv").find("predicted_reserved_peak_bytes"),
            std::string::npos);
}

// Fitting is not monotone in the batch: on a 1448MiB card ResNet-18 (CIFAR stem) fp32 fits batch
// 99, not 100, and 102 again (CardPrediction.TheLargestBatchIsNeverBelowABatchItSaysFits). Every
// trial of a setting gives the setting's one largest batch, at or above each batch that fits: the
// trial at 32 said 99 beside the trial at 102 that fits.
TEST(Sweep, EachTrialOfASettingGivesOneLargestBatchOnTheCard) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: cifar}
training: {device: cpu, memory_format: contiguous}
sweep: {batch_sizes: [32, 102], warmup_steps: 0, measure_steps: 1}
)");
  training::SweepRequest request{
      config.string(), {}, (dir / "out").string(), TRAIN_BINARY, "1448MiB"};
  ASSERT_EQ(training::run_sweep(request), 0);
  const auto trials = read_json(dir / "out/sweep.json").at("trials");
  ASSERT_EQ(trials.size(), 2u);
  ASSERT_EQ(trials[1].at("batch_size"), 102);
  ASSERT_TRUE(trials[1].at("fits_on_card").get<bool>()) << "the case is elsewhere now";
  const int64_t largest = trials[1].at("largest_batch_on_card").get<int64_t>();
  EXPECT_GE(largest, 102);
  EXPECT_EQ(trials[0].at("largest_batch_on_card"), largest);
  const std::string md = test_support::read_text(dir / "out/sweep.md");
  const std::string row_end = "| yes | " + std::to_string(largest) + " | - |\n";
  const size_t first = md.find(row_end);  // both rows of the card's table: fits, the same figure
  ASSERT_NE(first, std::string::npos) << md;
  EXPECT_NE(md.find(row_end, first + 1), std::string::npos) << md;
}

// A stop during `--card`'s recording of a trial's step (three recordings, at batches 2, 4 and 3:
// 6.7 s for ResNet-50) waited for all three, predicted the trial and stopped the sweep only as the
// next trial started. The recording takes the stop before its next recording: the trial's row (its
// measurement) says it was not predicted, and the sweep stops there (exit 130, not complete).
TEST(Sweep, AStopDuringTheCardsRecordingStopsTheSweepBeforeTheNextRecording) {
  test_support::TempDir dir;
  const auto config = write_config(dir, R"(
model: {arch: resnet18, stem: cifar}
training: {device: cpu, memory_format: contiguous}
sweep: {batch_sizes: [4, 8], warmup_steps: 0, measure_steps: 1}
)");
  const int code = sweep_stopped_at("card recording batch 4", config, dir / "out", "T4");
  EXPECT_EQ(code, training::kExitStopped);
  const auto sweep = read_json(dir / "out/sweep.json");
  EXPECT_FALSE(sweep.at("complete").get<bool>());
  ASSERT_EQ(sweep.at("trials").size(), 1u) << sweep.at("trials").dump();
  const auto& trial = sweep.at("trials")[0];
  EXPECT_EQ(trial.at("status"), "ok");
  EXPECT_FALSE(trial.contains("fits_on_card")) << trial.dump();
  EXPECT_EQ(trial.value("card_prediction_error", ""),
            "not predicted: stopped by a signal before its step's recording at batch 4 (of 2, 4 "
            "and 3)")
      << trial.dump();
  EXPECT_NE(test_support::read_text(dir / "out/sweep.md")
                .find("stopped by a signal after 1 trial(s); the same sweep run again"),
            std::string::npos);
}

namespace {

training::SweepTrial card_trial(int64_t id, training::CheckpointMode checkpointing) {
  training::SweepTrial t;
  t.id = id;
  t.setting.checkpointing = checkpointing;
  t.batch = 8;
  t.result.status = training::TrialStatus::Ok;
  t.result.peak_allocated_bytes = t.result.peak_reserved_bytes = 100 << 20;
  t.result.steps = 1;
  return t;
}

}  // namespace

// The card table says what its figures are under: an allocator capped at memory.limit (not the
// card less what lies outside it), and the trials it leaves out (checkpointing auto: left out
// without a word before), also when no trial was predicted.
TEST(Sweep, TheCardTableSaysItsLimitAndTheAutoTrialsItLeavesOut) {
  test_support::TempDir dir;
  auto predicted = card_trial(1, training::CheckpointMode::Off);
  training::CardPrediction on_t4;
  on_t4.card = training::find_card("T4");
  on_t4.replay.peak_allocated = int64_t{90} << 20;
  on_t4.replay.peak_reserved = int64_t{100} << 20;
  on_t4.beside.outside_allocator = int64_t{800} << 20;
  on_t4.largest_batch = 64;
  on_t4.allocator.limit = int64_t{2} << 30;
  on_t4.allocator.expandable_segments = true;
  on_t4.limited_by_memory_limit = true;
  on_t4.reducer_bucket_bytes = int64_t{45} << 20;
  predicted.on_card = on_t4;
  auto unpredicted = card_trial(2, training::CheckpointMode::Auto);
  unpredicted.on_card_error = unpredicted.setting.unpredictable(/*sweep=*/true);
  // Fourteenth pass: its advice was in `train memory --settings`' spelling.
  EXPECT_NE(unpredicted.on_card_error.find("; predict checkpointing off or on (every block "
                                           "recomputed): --checkpointing off,on"),
            std::string::npos)
      << unpredicted.on_card_error;
  const std::vector<training::SweepTrial> trials = {predicted, unpredicted, unpredicted};
  const std::vector<training::Setting> cells = {trials[0].setting, trials[1].setting};
  training::SweepFacts facts{"resnet18", "cifar", "cpu", "cpu", int64_t{2} << 30, true, 1, 1, {}};
  facts.card = "T4";
  training::write_sweep_tables(dir.path(), facts, training::summarize(cells, trials, {}, false),
                               trials, true);
  const std::string md = test_support::read_text(dir / "sweep.md");
  EXPECT_NE(md.find("## Predicted on T4"), std::string::npos) << md;
  EXPECT_NE(md.find("the caching allocator's model, options expandable_segments:True;"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Each rank holds c10d's Reducer's gradient buckets, 45.00 MiB"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("The allocator is capped at memory.limit, 2.00 GiB, below what the card leaves "
                    "it"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Not predicted: 2 trial(s), each with its reason in sweep.csv's "
                    "card_prediction_error"),
            std::string::npos)
      << md;
  training::SweepTrial uncapped = predicted;
  uncapped.on_card->limited_by_memory_limit = false;
  uncapped.on_card->allocator.expandable_segments = false;
  uncapped.on_card->reducer_bucket_bytes = 0;
  training::write_sweep_tables(dir.path(), facts, training::summarize(cells, trials, {}, false),
                               {uncapped}, true);
  const std::string plain = test_support::read_text(dir / "sweep.md");
  EXPECT_EQ(plain.find("capped at memory.limit"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("Reducer"), std::string::npos) << plain;
  EXPECT_NE(plain.find("the caching allocator's model, options the defaults;"), std::string::npos)
      << plain;
  EXPECT_EQ(plain.find("Not predicted"), std::string::npos) << plain;
  // A grid of auto trials alone: no table, but the section says why (it said nothing).
  training::write_sweep_tables(dir.path(), facts, training::summarize(cells, trials, {}, false),
                               {unpredicted}, true);
  const std::string autos = test_support::read_text(dir / "sweep.md");
  // The fourteenth pass: the section and the files named no card where none was predicted.
  EXPECT_NE(autos.find("## Predicted on T4\n\nNot predicted: 1 trial(s)"), std::string::npos)
      << autos;
  const auto json = read_json(dir / "sweep.json");
  EXPECT_EQ(json.at("card"), "T4");
  EXPECT_EQ(json.at("trials")[0].at("card"), "T4");
  EXPECT_NE(test_support::read_text(dir / "sweep.csv").find("T4"), std::string::npos);
  facts.card.clear();  // no --card: null
  training::write_sweep_tables(dir.path(), facts, training::summarize(cells, trials, {}, false),
                               {predicted}, true);
  EXPECT_TRUE(read_json(dir / "sweep.json").at("card").is_null());
}
