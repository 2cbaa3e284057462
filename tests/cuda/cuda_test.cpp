// The CUDA suite (`ctest -L cuda`): every CUDA path of the trainer, run on a real GPU. Each test
// skips with a message where no GPU is usable, so the suite builds and passes on CPU machines;
// scripts/gpu_check.sh runs it on a GPU machine. Most tests drive the `train` executable, each
// in a fresh process, because start-up (the device's lazy initialisation, the memory limit before
// the first tensor) is part of what they check.
#include <c10/core/impl/VirtualGuardImpl.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/dataset.h"
#include "data/loader.h"
#include "models/resnet.h"
#include "support/step_state.h"
#include "test_support.h"
#include "training/config/config.h"
#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/platform/device.h"
#include "training/platform/memory.h"
#include "training/platform/monitor.h"
#include "training/run/checkpoint_io.h"
#include "training/run/run_dir.h"
#include "training/step/amp.h"
#include "training/step/graphed_step.h"
#include "training/step/optim.h"
#include "training/step/recompute.h"
#include "training/step/step.h"
#include "training/studies/trial.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

#define CUDA_OR_SKIP()                                                 \
  do {                                                                 \
    const std::string why = training::cuda_unavailable_reason(0);      \
    if (!why.empty()) GTEST_SKIP() << "no usable GPU (" << why << ")"; \
  } while (0)

const torch::Device kGpu(torch::kCUDA, 0);

// A crash of this process prints its stack (ctest keeps the output), and gtest's progress lines
// are written at once, so the log shows which test and which frame a crash came from (the first
// H200 run lost 11 tests to SIGSEGV with no stack to show: see TempDir in test_support.h).
void print_stack_and_die(int signal) {
  void* frames[64];
  const int count = backtrace(frames, 64);
  static const char header[] = "\ncuda_tests: fatal signal; stack:\n";
  (void)!write(STDERR_FILENO, header, sizeof header - 1);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}
const bool kCrashReportInstalled = [] {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  std::signal(SIGSEGV, print_stack_and_die);
  std::signal(SIGBUS, print_stack_and_die);
  return true;
}();

struct Result {
  int code = -1;
  std::string output;
};

Result run(const std::string& command) {
  Result result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

Result train(const std::string& arguments) {
  return run(std::string(TRAIN_BINARY) + " " + arguments);
}

// ResNet-18, CIFAR stem, synthetic data on cuda:0: a few seconds per run on any GPU.
fs::path write_config(const test_support::TempDir& dir, const std::string& extra = "") {
  std::ofstream(dir / "gpu.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                     "data: {source: synthetic, synthetic_train_size: 512, "
                                     "synthetic_test_size: 256}\n"
                                     "training: {device: cuda, epochs: 1, batch_size: 64, "
                                     "eval_batch_size: 128, log_every_steps: 2}\n"
                                  << extra;
  return dir / "gpu.yaml";
}

std::vector<json> metrics(const fs::path& run_dir) {
  std::vector<json> rows;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

TEST(Cuda, MemoryQueriesAndTheLimitWorkBeforeTheFirstTensor) {
  CUDA_OR_SKIP();
  // A fresh process (ctest runs each test alone): CUDA is not initialised yet.
  EXPECT_NO_THROW(training::memory_stats(kGpu));
  EXPECT_NO_THROW(training::reset_peak_memory(kGpu));
  EXPECT_NO_THROW(training::set_memory_limit(kGpu, int64_t{1} << 30));
  EXPECT_THROW(torch::empty({int64_t{2} << 30}, torch::TensorOptions(torch::kUInt8).device(kGpu)),
               c10::OutOfMemoryError);
}

TEST(Cuda, TrainsInEveryPrecision) {
  CUDA_OR_SKIP();
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    test_support::TempDir dir;
    const auto r = train("--config " + write_config(dir).string() + " --output-dir " +
                         (dir / "run").string() + " --set training.precision=" + precision);
    ASSERT_EQ(r.code, 0) << r.output;
    const auto row = metrics(dir / "run").at(0);
    EXPECT_EQ(row.at("device"), "cuda:0");
    EXPECT_TRUE(std::isfinite(row.at("train_loss").get<double>()));
    EXPECT_GT(row.at("train_peak_allocated_bytes").get<int64_t>(), 0);
    EXPECT_GE(row.at("train_peak_reserved_bytes").get<int64_t>(),
              row.at("train_peak_allocated_bytes").get<int64_t>());
    EXPECT_NE(test_support::read_text(dir / "run/train.log").find("cuda:0 ("), std::string::npos);
  }
}

TEST(Cuda, GradScalerSkipsAnOverflowingStepAndHalvesTheScale) {
  CUDA_OR_SKIP();
  auto weight = torch::ones({4}, torch::TensorOptions().device(kGpu).requires_grad(true));
  torch::optim::SGD sgd({weight}, torch::optim::SGDOptions(0.1));
  training::GradScaler scaler(true, kGpu);
  const double scale = scaler.current_scale();
  // An inf gradient: the step is skipped, the weight untouched, the scale halved.
  scaler.scale((weight * std::numeric_limits<float>::infinity()).sum()).backward();
  EXPECT_FALSE(scaler.step(sgd));
  scaler.update();
  EXPECT_TRUE(torch::equal(weight.detach().cpu(), torch::ones({4})));
  EXPECT_DOUBLE_EQ(scaler.current_scale(), scale / 2);
  // A finite one: the step is taken with the unscaled gradient (1 per element).
  sgd.zero_grad();
  scaler.scale(weight.sum()).backward();
  EXPECT_TRUE(scaler.step(sgd));
  scaler.update();
  EXPECT_TRUE(torch::allclose(weight.detach().cpu(), torch::full({4}, 0.9)));
}

TEST(Cuda, CheckpointedGradientsEqualThePlainOnesWithRandomOpsInTheSegment) {
  CUDA_OR_SKIP();
  torch::manual_seed(3);
  torch::nn::Linear linear(64, 64);
  linear->to(kGpu);
  models::Segment segment;
  segment.modules = {linear.ptr()};
  // Dropout draws from the CUDA generator: the recomputation must replay the same mask.
  segment.forward = [&](const torch::Tensor& x) {
    return torch::dropout(torch::relu(linear->forward(x)), 0.5, /*train=*/true);
  };
  auto input = torch::randn({32, 64}, torch::TensorOptions().device(kGpu));
  auto gradients = [&](bool checkpointed) {
    linear->zero_grad();
    torch::manual_seed(7);  // the same dropout mask in both runs
    auto x = input.clone().requires_grad_(true);
    auto y = checkpointed ? training::checkpoint(segment, x) : segment.forward(x);
    (y * y).sum().backward();
    return std::make_pair(linear->weight.grad().clone(), x.grad().clone());
  };
  const auto plain = gradients(false);
  const auto checkpointed = gradients(true);
  EXPECT_TRUE(torch::allclose(plain.first, checkpointed.first, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(plain.second, checkpointed.second, 1e-5, 1e-5));
}

TEST(Cuda, OutOfMemoryUnderTheLimitExitsThreeAndKeepsTheCheckpoint) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  const auto run_dir = dir / "run";
  auto r = train("--config " + write_config(dir).string() + " --output-dir " + run_dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto checkpoint = test_support::read_text(run_dir / "checkpoint.pt");
  r = train("--resume " + run_dir.string() +
            " --set training.epochs=2 --set training.batch_size=4096"
            " --set data.synthetic_train_size=8192 --memory-limit 1GiB");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("out of memory on cuda:0 in epoch 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(memory.limit)"), std::string::npos) << r.output;
  EXPECT_EQ(test_support::read_text(run_dir / "checkpoint.pt"), checkpoint);
}

// checkpointing.enabled: auto on the caching allocator: under a memory.limit a quarter of the way
// from every block recomputed to none, the plain step runs out of memory and auto trains, its
// measured peak within the budget and near its prediction.
TEST(Cuda, AutoCheckpointingTrainsWithinTheBudgetItChose) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  const auto yaml = write_config(dir);
  const std::string sets = " --set training.batch_size=256 --set training.memory_format=contiguous";
  training::Config config = training::load_config(
      yaml.string(), {"training.batch_size=256", "training.memory_format=contiguous"});
  const auto m = training::measure_blocks(config, torch::Device(torch::kCUDA, 0));
  const auto unbounded = training::choose_blocks(m, int64_t{1} << 50);
  const int64_t budget =
      unbounded.smallest_peak + (unbounded.plain_peak - unbounded.smallest_peak) / 4;
  const int64_t limit = budget * 10 / 9;
  ASSERT_LT(limit, unbounded.plain_peak);
  const std::string args =
      "--config " + yaml.string() + sets + " --memory-limit " + std::to_string(limit) + "B";
  EXPECT_EQ(train(args + " --output-dir " + (dir / "plain").string()).code, 3);
  const auto r = train(args + " --output-dir " + (dir / "auto").string() +
                       " --set checkpointing.enabled=auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("within the budget of"), std::string::npos) << r.output;
  const auto decided =
      training::read_decisions(dir / "auto", training::load_config(yaml.string())).checkpointing;
  ASSERT_TRUE(decided);
  EXPECT_FALSE(decided->blocks.empty());
  const auto peak = metrics(dir / "auto").at(0).at("train_peak_allocated_bytes").get<int64_t>();
  EXPECT_LE(peak, decided->budget);
  EXPECT_NEAR(static_cast<double>(peak), static_cast<double>(decided->predicted_peak),
              0.05 * static_cast<double>(peak));
}

TEST(Cuda, PeaksAreResetAtEveryPhaseBoundary) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  // Evaluation at batch 2048 needs far more than training at batch 16.
  const auto r =
      train("--config " + write_config(dir).string() + " --output-dir " + (dir / "run").string() +
            " --set training.epochs=2 --set training.batch_size=16"
            " --set training.eval_batch_size=2048 --set data.synthetic_test_size=2048");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto rows = metrics(dir / "run");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_LT(row.at("train_peak_allocated_bytes").get<int64_t>(),
              row.at("eval_peak_allocated_bytes").get<int64_t>());
    EXPECT_EQ(row.at("peak_allocated_bytes").get<int64_t>(),
              row.at("eval_peak_allocated_bytes").get<int64_t>());
  }
  // Without a reset at the start of training, epoch 2's training peak would include epoch 1's
  // evaluation.
  EXPECT_LT(rows[1].at("train_peak_allocated_bytes").get<int64_t>(),
            rows[0].at("eval_peak_allocated_bytes").get<int64_t>());
}

TEST(Cuda, FindMaxUnderTwoGiBGivesABatchThatTrainsAndOneMoreThatDoesNot) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  const auto config = write_config(dir, "sweep: {warmup_steps: 1, measure_steps: 1}\n");
  auto r = train("sweep --config " + config.string() + " --batch-sizes 64,128 --find-max" +
                 " --memory-limit 2GiB --output-dir " + (dir / "sweep").string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir / "sweep/sweep.json");
  const auto cell = json::parse(in).at("cells").at(0);
  const int64_t largest = cell.at("largest_fitting_batch").get<int64_t>();
  EXPECT_EQ(cell.at("smallest_failing_batch").get<int64_t>(), largest + 1);
  auto train_at = [&](int64_t batch) {
    return train("--config " + config.string() + " --output-dir " +
                 (dir / ("b" + std::to_string(batch))).string() +
                 " --memory-limit 2GiB --set training.max_steps=2 --set training.eval_batch_size=64"
                 " --set checkpoint.enabled=false --set data.synthetic_train_size=" +
                 std::to_string(2 * (batch + 1)) +
                 " --set training.batch_size=" + std::to_string(batch));
  };
  r = train_at(largest);
  EXPECT_EQ(r.code, 0) << r.output;
  r = train_at(largest + 1);
  EXPECT_EQ(r.code, 3) << r.output;
}

TEST(Cuda, SweepTrialsReportTheSteadyPeakApart) {
  CUDA_OR_SKIP();
  auto config = training::parse_config(
      "model: {arch: resnet18, stem: cifar}\ntraining: {device: cuda, batch_size: 64}\n", "trial");
  const auto result = training::measure_trial(config, 2, 3);
  ASSERT_EQ(result.status, training::TrialStatus::Ok) << result.message;
  ASSERT_TRUE(result.steady_peak_reserved_bytes && result.steady_peak_allocated_bytes);
  EXPECT_GT(*result.steady_peak_reserved_bytes, 0);
  EXPECT_LE(*result.steady_peak_reserved_bytes, result.peak_reserved_bytes);
  EXPECT_LE(*result.steady_peak_allocated_bytes, result.peak_allocated_bytes);
}

// The data path: the split held on the GPU gives the batches the host path gives (same order,
// crops and flips: every random choice is drawn on the CPU from the same seeds).
TEST(Cuda, DeviceResidentDataGivesTheSameBatches) {
  CUDA_OR_SKIP();
  const auto split = data::make_synthetic(640, 5);
  auto batches = [&](bool resident) {
    data::BatchLoader loader(
        split,
        data::LoaderOptions().batch_size(64).device(kGpu).seed(4).augment(true).device_resident(
            resident));
    loader.start_epoch(2);
    std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
    while (auto batch = loader.next()) out.emplace_back(batch->images.cpu(), batch->labels.cpu());
    return out;
  };
  const auto host = batches(false);
  const auto resident = batches(true);
  ASSERT_EQ(host.size(), resident.size());
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_TRUE(torch::allclose(host[i].first, resident[i].first, 1e-6, 1e-6)) << "batch " << i;
    EXPECT_TRUE(torch::equal(host[i].second, resident[i].second)) << "batch " << i;
  }
}

// End to end: a run on device-resident data trains like one on host data. Not number for number:
// cuDNN's backward kernels accumulate in a non-deterministic order, so two runs of the same
// batches differ in the last digits (4e-4 in the loss after 8 steps, seen on an H200).
TEST(Cuda, DeviceResidentDataTrainsLikeHostData) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  const auto config = write_config(dir, "optimizer: {lr: 0.05}\n").string();
  std::vector<json> rows[2];
  for (int resident = 0; resident < 2; ++resident) {
    const auto out = dir / ("r" + std::to_string(resident));
    const auto r = train("--config " + config + " --output-dir " + out.string() +
                         " --set data.device_resident=" + (resident ? "true" : "false"));
    ASSERT_EQ(r.code, 0) << r.output;
    rows[resident] = metrics(out);
  }
  const double loss = rows[0].at(0).at("train_loss").get<double>();
  EXPECT_NEAR(rows[1].at(0).at("train_loss").get<double>(), loss, 0.01 * loss);
  EXPECT_EQ(rows[0].at(0).at("step"), rows[1].at(0).at("step"));
}

TEST(Cuda, PrefetchingOnASideStreamYieldsTheSameBatches) {
  CUDA_OR_SKIP();
  const auto split = data::make_synthetic(640, 5);
  auto batches = [&](int64_t prefetch) {
    data::BatchLoader loader(
        split, data::LoaderOptions().batch_size(64).device(kGpu).seed(4).prefetch(prefetch));
    loader.start_epoch(1);
    std::vector<torch::Tensor> images;
    while (auto batch = loader.next()) {
      // Work on the consumer's stream between batches, as training does.
      images.push_back((batch->images * 1.0).cpu());
    }
    return images;
  };
  const auto inline_batches = batches(0);
  const auto prefetched = batches(3);
  ASSERT_EQ(inline_batches.size(), prefetched.size());
  for (size_t i = 0; i < prefetched.size(); ++i) {
    EXPECT_TRUE(torch::equal(inline_batches[i], prefetched[i])) << "batch " << i;
  }
}

TEST(Cuda, NvmlSamplerAgreesWithNvidiaSmi) {
  CUDA_OR_SKIP();
  const std::string bus_id = training::pci_bus_id(kGpu);
  std::string why;
  auto probe = training::make_nvml_probe("cuda:0", bus_id, "libnvidia-ml.so.1", &why);
  ASSERT_NE(probe, nullptr) << why;
  const auto held =
      torch::empty({int64_t{2} << 30}, torch::TensorOptions(torch::kUInt8).device(kGpu));
  training::synchronize(kGpu);
  const auto sample = probe->read();
  ASSERT_TRUE(sample.memory_used.has_value());
  const auto smi =
      run("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i " + bus_id);
  if (smi.code != 0) GTEST_SKIP() << "nvidia-smi unavailable: " << smi.output;
  const double smi_bytes = std::stod(smi.output) * (1 << 20);
  EXPECT_NEAR(static_cast<double>(*sample.memory_used), smi_bytes, 0.05 * smi_bytes)
      << "NVML " << *sample.memory_used << " bytes, nvidia-smi " << smi.output;
  EXPECT_GE(*sample.memory_used, int64_t{2} << 30);
}

TEST(Cuda, ProfilerTraceHoldsKernelEvents) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  const auto r =
      train("--config " + write_config(dir).string() + " --output-dir " + (dir / "run").string() +
            " --set profiler.enabled=true --set profiler.steps=[2,3]");
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir / "run/trace.json");
  const auto trace = json::parse(in);
  int64_t kernels = 0;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.value("cat", std::string()) == "kernel") ++kernels;
  }
  EXPECT_GT(kernels, 50);
  EXPECT_NE(test_support::read_text(dir / "run/train.log").find("[gpu] "), std::string::npos);
}

// The pickled allocator history PyTorch's memory viewer opens: protocol-2+ pickle bytes that
// name the snapshot's top-level keys.
void expect_memory_snapshot(const fs::path& file) {
  const std::string bytes = test_support::read_text(file);
  ASSERT_GT(bytes.size(), 1000u) << file;
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x80) << file;  // PROTO opcode
  EXPECT_NE(bytes.find("segments"), std::string::npos) << file;
  EXPECT_NE(bytes.find("device_traces"), std::string::npos) << file;
}

TEST(Cuda, MemorySnapshotOfTheProfilerWindow) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  const auto r =
      train("--config " + write_config(dir).string() + " --output-dir " + (dir / "run").string() +
            " --set memory.snapshot=true --set profiler.steps=[2,3]");
  ASSERT_EQ(r.code, 0) << r.output;
  expect_memory_snapshot(dir / "run/memory_snapshot.pickle");
}

// `train memory` on the caching allocator: the rows reconcile with its peak, the timeline comes
// from its trace, and memory.snapshot writes each setting's history.
TEST(Cuda, MemoryBreakdownReconcilesOnTheCachingAllocator) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  const auto r = train("memory --config " + write_config(dir).string() + " --output-dir " +
                       (dir / "study").string() +
                       " --settings fp32,bf16+checkpointing --set memory.snapshot=true");
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir / "study/memory_breakdown.json");
  const auto study = json::parse(in);
  for (const auto& setting : study.at("settings")) {
    ASSERT_EQ(setting.at("status"), "ok") << setting.at("message");
    const double measured = setting.at("measured_peak_bytes").get<double>();
    EXPECT_LE(std::abs(setting.at("unexplained_bytes").get<double>()), 0.10 * measured);
    // cuBLAS's workspaces (about 65 MiB on an H200, seen with ResNet-18 and ResNet-50 alike).
    for (const auto& row : setting.at("rows")) {
      if (row.at("name") != "library workspaces") continue;
      EXPECT_GE(row.at("bytes").get<int64_t>(), 0);
      EXPECT_LE(row.at("bytes").get<int64_t>(), int64_t{256} << 20);
    }
  }
  std::ifstream timeline_in(dir / "study/memory_timeline.json");
  const auto timeline = json::parse(timeline_in);
  EXPECT_GT(timeline.at("settings")[0].at("events").get<int64_t>(), 100);
  expect_memory_snapshot(dir / "study/memory_snapshot-fp32.pickle");
}

TEST(Cuda, BenchMatmulAndCompareDevicesProduceCudaRows) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  auto r =
      train("bench matmul --size 1024 --devices cuda --dtypes fp32,bf16 --repeats 2 --output " +
            (dir / "matmul.json").string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir / "matmul.json");
  for (const auto& row : json::parse(in)) {
    EXPECT_TRUE(row.at("available").get<bool>()) << row.dump();
    EXPECT_GT(row.at("gflops").get<double>(), 1000.0) << row.dump();
    // A, B and C at least; cached blocks of an earlier row are not counted again.
    EXPECT_GE(row.at("memory_bytes").get<int64_t>(), 3 * 1024 * 1024 * 2) << row.dump();
  }
  r = run(std::string(TEST_PYTHON) + " " + PROJECT_SOURCE_DIR +
          "/scripts/compare_devices.py --train " + TRAIN_BINARY + " --config " +
          write_config(dir).string() +
          " --tables study --cpu-steps 15 --gpu-steps 15 --devices cpu,cuda --out " +
          (dir / "compare").string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream compare(dir / "compare/compare.json");
  const auto comparison = json::parse(compare);  // alive for the loop (a temporary's member is not)
  bool cuda_row = false;
  for (const auto& entry : comparison.at("tables").at("study")) {
    if (entry.at("device") != "cuda") continue;
    cuda_row = entry.at("available").get<bool>();
    if (!cuda_row) break;
    // write_config's whole epoch is 8 steps (512 images, batch 64; 15 steps asked for): 5 of
    // them warm-up, 3 steady, the epoch measured.
    EXPECT_GT(entry.at("totals").at("steady_images_per_second").get<double>(), 0.0);
    EXPECT_EQ(entry.at("totals").at("warmup_steps").get<int64_t>(), 5);
    EXPECT_FALSE(entry.at("totals").at("epoch_seconds_projected").get<bool>());
    EXPECT_GT(entry.at("speedup_over_cpu").get<double>(), 0.0);
  }
  EXPECT_TRUE(cuda_row) << test_support::read_text(dir / "compare/compare.json");
}

// The resume tests' config (see ResumeContinuesTheSameLossCurve for why these settings), as
// train's arguments: 3 epochs of 8 steps.
std::string resume_config(const test_support::TempDir& dir) {
  return write_config(dir, "schedule: {name: step, milestones: [2]}\noptimizer: {lr: 0.01}\n")
             .string() +
         " --set training.epochs=3 --set training.cudnn_benchmark=false --set "
         "training.allow_tf32=false";
}

// Three epochs each, the same steps, training and test losses within 2% (cuDNN's
// non-deterministic algorithms: close, not bit-equal).
void expect_same_loss_curve(const std::vector<json>& straight, const std::vector<json>& resumed) {
  ASSERT_EQ(straight.size(), 3u);
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    for (const char* column : {"train_loss", "test_loss"}) {
      EXPECT_NEAR(straight[i].at(column).get<double>(), resumed[i].at(column).get<double>(),
                  0.02 * straight[i].at(column).get<double>())
          << column << ", epoch " << i + 1;
    }
    EXPECT_EQ(straight[i].at("step"), resumed[i].at("step"));
  }
}

// The two runs' final checkpoints hold the same state: parameters, BatchNorm statistics (the
// step counts equal), momentum buffers, each within 5% of its norm.
void expect_same_final_state(const test_support::TempDir& dir, const fs::path& straight,
                             const fs::path& resumed) {
  const auto config = training::parse_config(test_support::read_text(dir / "gpu.yaml"), "gpu.yaml");
  training::StepParts a = training::build_step_parts(config, kGpu);
  training::StepParts b = training::build_step_parts(config, kGpu);
  training::load_checkpoint(straight / "checkpoint.pt", *a.model, *a.optimizer, kGpu);
  training::load_checkpoint(resumed / "checkpoint.pt", *b.model, *b.optimizer, kGpu);
  test_support::expect_same_step_state(a, b, /*relative=*/0.05);
}

// A gentle learning rate and cuDNN's default algorithms without TF32: at lr 0.1 on random labels
// the loss diverges (6.0 in epoch 2) and cuDNN's run-to-run rounding differences grow to 10% of
// it (seen on an H200), which would say nothing about resuming. The CPU suite checks that a
// resumed run is bit-equal; this checks the CUDA state (device tensors, cuDNN) comes back.
TEST(Cuda, ResumeContinuesTheSameLossCurve) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  const auto config = resume_config(dir);
  auto r = train("--config " + config + " --output-dir " + (dir / "straight").string());
  ASSERT_EQ(r.code, 0) << r.output;
  r = train("--config " + config + " --output-dir " + (dir / "split").string() +
            " --set training.max_steps=12");
  ASSERT_EQ(r.code, 0) << r.output;
  r = train("--resume " + (dir / "split").string() + " --set training.max_steps=0");
  ASSERT_EQ(r.code, 0) << r.output;
  expect_same_loss_curve(metrics(dir / "straight"), metrics(dir / "split"));
  expect_same_final_state(dir, dir / "straight", dir / "split");
}

// training.cuda_graph: the captured step against the eager one, from the same weights on the
// same 20 batches, with a schedule that changes between replays: 0.1 for steps 1-10, 0 for
// 11-15 (a rate frozen into the graph at capture would keep moving the weights), 0.05 after.
TEST(Cuda, GraphedStepTrainsLikeTheEagerStepWithAChangingLearningRate) {
  CUDA_OR_SKIP();
  const auto config = training::parse_config(
      "model: {arch: resnet18, stem: cifar}\n"
      "training: {device: cuda, batch_size: 64, precision: bf16, memory_format: channels_last, "
      "cuda_graph: on, ema_decay: 0.9}\n",
      "graph");
  training::StepParts eager = training::build_step_parts(config, kGpu);
  training::StepParts graphed_parts = training::build_step_parts(config, kGpu);
  const auto bf16 = training::StepOptions().precision(training::Precision::BF16);
  training::GraphedStep graphed(graphed_parts, bf16, kGpu);
  eager.model->train();
  graphed_parts.model->train();
  torch::manual_seed(7);
  std::vector<torch::Tensor> after_ten;
  for (int step = 1; step <= 20; ++step) {
    const auto images = torch::randn({64, 3, 32, 32}, torch::TensorOptions().device(kGpu))
                            .contiguous(at::MemoryFormat::ChannelsLast);
    const auto labels =
        torch::randint(0, 10, {64}, torch::TensorOptions(torch::kInt64).device(kGpu));
    const double lr = step <= 10 ? 0.1 : step <= 15 ? 0.0 : 0.05;
    training::set_learning_rate(*eager.optimizer, lr);
    training::set_learning_rate(*graphed_parts.optimizer, lr);
    const double a = training::train_step(eager, images, labels, bf16).loss.item<double>();
    const double b = graphed.run(images, labels).loss.item<double>();
    EXPECT_NEAR(a, b, 0.02 * std::abs(a) + 1e-3) << "step " << step;
    EXPECT_EQ(graphed.captured(), step > training::GraphedStep::kWarmupSteps) << "step " << step;
    EXPECT_EQ(graphed.last_run_replayed(), step > training::GraphedStep::kWarmupSteps)
        << "step " << step;
    if (step == 10) {
      for (const auto& p : graphed_parts.model->parameters())
        after_ten.push_back(p.detach().clone());
    }
    if (step == 15) {  // five replays at rate 0 left every weight as it was
      const auto params = graphed_parts.model->parameters();
      for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(params[i].equal(after_ten[i])) << i;
    }
  }
  EXPECT_GT(graphed.pool_bytes(), 0);
  const auto pa = eager.model->parameters(), pb = graphed_parts.model->parameters();
  const auto params = graphed_parts.model->parameters();
  int moved = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_LT((pa[i] - pb[i]).norm().item<double>(), 0.02 * pa[i].norm().item<double>() + 1e-4);
    moved += params[i].equal(after_ten[i]) ? 0 : 1;
  }
  EXPECT_GT(moved, 0);  // and the five replays at 0.05 did move them
  // BatchNorm's statistics and step counts, the momentum buffers and the weight average moved
  // inside the replays as in the eager steps.
  test_support::expect_same_step_state(eager, graphed_parts, /*relative=*/0.02);
}

// Checkpoints are the same whichever step wrote them: a graphed run stopped mid-epoch resumes
// eager, and an eager one resumes graphed, on the loss curve of the run that went straight.
TEST(Cuda, CheckpointsResumeAcrossGraphedAndEagerSteps) {
  CUDA_OR_SKIP();
  test_support::TempDir dir;
  const auto config = resume_config(dir);
  auto r = train("--config " + config + " --output-dir " + (dir / "straight").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto straight = metrics(dir / "straight");
  ASSERT_EQ(straight.size(), 3u);
  for (const auto& [first, then] : {std::pair{"on", "off"}, std::pair{"off", "on"}}) {
    SCOPED_TRACE(std::string(first) + " then " + then);
    const fs::path split = dir / (std::string("split-") + first);
    r = train("--config " + config + " --output-dir " + split.string() +
              " --set training.max_steps=12 --set training.cuda_graph=" + first);
    ASSERT_EQ(r.code, 0) << r.output;
    r = train("--resume " + split.string() +
              " --set training.max_steps=0 --set training.cuda_graph=" + then);
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string log = test_support::read_text(split / "train.log");
    EXPECT_NE(log.find("training step captured in a CUDA graph after 3 warm-up steps (batch 64)"),
              std::string::npos)
        << log;
    expect_same_loss_curve(straight, metrics(split));
    expect_same_final_state(dir, dir / "straight", split);
  }
}

// A graphed sweep trial measures replays only: its warm-up grows to cover the capture.
TEST(Cuda, GraphedSweepTrialMeasuresReplays) {
  CUDA_OR_SKIP();
  auto config = training::parse_config(
      "model: {arch: resnet18, stem: cifar}\n"
      "training: {device: cuda, batch_size: 64, precision: bf16, cuda_graph: on}\n",
      "trial");
  const auto result = training::measure_trial(config, 2, 3);
  ASSERT_EQ(result.status, training::TrialStatus::Ok) << result.message;
  EXPECT_EQ(result.steps, training::GraphedStep::kWarmupSteps + 1 + 3);
  EXPECT_EQ(result.replayed_steps, 3);  // every measured step, and only those
  EXPECT_EQ(training::trial_from_json(training::to_json(result)).replayed_steps, 3);
  EXPECT_GT(result.images_per_second.value_or(0.0), 0.0);
}

// The capture starts from an empty cache (as torch.cuda.graph's does): blocks the warm-up freed
// are not held twice, once in the default pool and once in the graph's.
TEST(Cuda, GraphCaptureEmptiesTheCacheFirst) {
  CUDA_OR_SKIP();
  const int64_t cached = int64_t{512} << 20;
  torch::empty({cached}, torch::TensorOptions(torch::kUInt8).device(kGpu));  // freed, cached
  ASSERT_GE(training::memory_stats(kGpu).reserved, cached);
  auto x = torch::ones({1024}, torch::TensorOptions().device(kGpu));
  auto y = torch::zeros_like(x);
  training::DeviceGraph graph(kGpu);
  graph.warm_up([&] { y.copy_(x * 2); });
  graph.capture([&] { y.copy_(x * 2); });
  EXPECT_LT(training::memory_stats(kGpu).reserved, cached);
  x.fill_(3);
  graph.replay();
  EXPECT_EQ(y.sum().item<double>(), 6.0 * 1024);
}

// A capture that fails leaves the process as before it: the pool released, the allocator no
// longer routing to it, and the next graph captures and replays. Two ways to fail: the work
// throws, and the work does what a capture forbids (a host synchronisation).
TEST(Cuda, AFailedCaptureLeavesTheAllocatorAsItWas) {
  CUDA_OR_SKIP();
  auto x = torch::ones({1024}, torch::TensorOptions().device(kGpu));
  const std::vector<std::function<void()>> failures = {
      [&] {
        auto held = torch::empty({int64_t{64} << 20}, torch::TensorOptions().device(kGpu));
        throw std::runtime_error("the work failed");
      },
      [&] { (void)(x * 2).sum().item<double>(); },
  };
  for (size_t i = 0; i < failures.size(); ++i) {
    SCOPED_TRACE(i);
    training::DeviceGraph failing(kGpu);
    failing.warm_up([&] { (void)(x * 2); });
    const int64_t before = training::memory_stats(kGpu).allocated;
    EXPECT_ANY_THROW(failing.capture(failures[i]));
    EXPECT_FALSE(failing.captured());
    EXPECT_EQ(training::memory_stats(kGpu).allocated, before);
    EXPECT_LT(training::memory_stats(kGpu).reserved, int64_t{64} << 20);  // the pool is gone
    // Eager work on the current stream, then a new graph on its own stream.
    EXPECT_EQ((x * 3).sum().item<double>(), 3.0 * 1024);
    auto y = torch::zeros_like(x);
    training::DeviceGraph next(kGpu);
    next.warm_up([&] { y.copy_(x + 1); });
    next.capture([&] { y.copy_(x + 1); });
    x.fill_(4);
    next.replay();
    EXPECT_EQ(y.sum().item<double>(), 5.0 * 1024);
    x.fill_(1);
  }
}

// The graph's side stream is never one the loader (or anything else taking from the global
// pool) is handed, however many streams are taken.
TEST(Cuda, TheGraphsStreamIsNeverALoaderStream) {
  CUDA_OR_SKIP();
  training::DeviceGraph graph(kGpu);
  const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
  for (int i = 0; i < 96; ++i) {
    EXPECT_NE(cuda.getStreamFromGlobalPool(kGpu).id(), graph.stream_id()) << i;
  }
}

}  // namespace
