#include "training/platform/monitor.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "test_support.h"

namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> read_lines(const fs::path& file) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(Sampler, CpuProbeWritesStampedSamplesAndSummarises) {
  test_support::TempDir dir;
  {
    training::Sampler sampler(training::make_cpu_probe(), 0.05, dir / "gpu.jsonl");
    sampler.set_position(3, 17);
    // Keep one core busy so utilisation is clearly above zero.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
    auto a = torch::randn({256, 256});
    while (std::chrono::steady_clock::now() < until) a = torch::mm(a, a).tanh();
    const auto summary = sampler.take_summary();
    EXPECT_GE(summary.samples, 4);
    ASSERT_TRUE(summary.utilization_mean.has_value());
    // One busy thread of the usable CPUs: judged against the threads in use, not the machine's.
    EXPECT_GT(*summary.utilization_max, 0.25 / training::usable_cpus());
    EXPECT_LE(*summary.utilization_max, 1.0);
    EXPECT_GT(summary.memory_used_max.value_or(0), 10 << 20);
    EXPECT_EQ(sampler.take_summary().samples, 0);  // taken
  }
  const auto lines = read_lines(dir / "gpu.jsonl");
  ASSERT_GE(lines.size(), 4u);
  const auto& last = lines.back();
  EXPECT_EQ(last.at("device"), "cpu");
  EXPECT_EQ(last.at("epoch"), 3);
  EXPECT_EQ(last.at("step"), 17);
  EXPECT_GT(last.at("time").get<double>(), 1.7e9);  // a Unix time
  EXPECT_TRUE(last.at("power_watts").is_null());
  EXPECT_GT(last.at("memory_total_bytes").get<int64_t>(),
            last.at("memory_used_bytes").get<int64_t>());
}

// Sixteenth pass: gpu.jsonl a folder lost every sample without a word. The sampler says once
// that it cannot write its file, and the run goes on.
TEST(Sampler, AFileItCannotWriteIsSaidOnce) {
  test_support::TempDir dir;
  fs::create_directories(dir / "gpu.jsonl");
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  {
    training::Sampler sampler(training::make_cpu_probe(), 60, dir / "gpu.jsonl");
    sampler.sample_now();
    sampler.sample_now();
    EXPECT_EQ(sampler.take_summary().samples, 3);  // the first at once, then the two asked
  }
  spdlog::set_default_logger(previous);
  const std::string said = log.str();
  const std::string line = "monitor: cannot write " + (dir / "gpu.jsonl").string();
  EXPECT_NE(said.find(line), std::string::npos) << said;
  EXPECT_EQ(said.find(line), said.rfind(line)) << said;
}

TEST(Sampler, NvmlProbeReadsThroughTheLoadedLibrary) {
  std::string why;
  auto probe = training::make_nvml_probe("cuda:0", "0000:3B:00.0", FAKE_NVML_LIBRARY, &why);
  ASSERT_NE(probe, nullptr) << why;
  EXPECT_EQ(probe->device(), "cuda:0");
  const auto sample = probe->read();
  EXPECT_DOUBLE_EQ(sample.utilization.value(), 0.42);
  EXPECT_EQ(sample.memory_used.value(), int64_t{1} << 30);
  EXPECT_EQ(sample.memory_total.value(), int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(sample.power_watts.value(), 300.0);
  EXPECT_DOUBLE_EQ(sample.sm_clock_mhz.value(), 1980.0);
  EXPECT_DOUBLE_EQ(sample.temperature_c.value(), 55.0);

  test_support::TempDir dir;
  {
    training::Sampler sampler(std::move(probe), 10.0, dir / "gpu.jsonl");
    sampler.sample_now();
    const auto summary = sampler.take_summary();
    EXPECT_EQ(summary.samples, 2);  // the first at start-up, one asked for
    EXPECT_DOUBLE_EQ(summary.utilization_mean.value(), 0.42);
    EXPECT_EQ(summary.memory_used_max.value(), int64_t{1} << 30);
  }
  const auto line = read_lines(dir / "gpu.jsonl").front();
  EXPECT_EQ(line.at("device"), "cuda:0");
  EXPECT_DOUBLE_EQ(line.at("power_watts").get<double>(), 300.0);
}

// With CUDA_VISIBLE_DEVICES=1, cuda:0 is the machine's second GPU: the probe must read the GPU
// at the CUDA device's bus id, not NVML's GPU 0.
TEST(Sampler, NvmlProbeFindsTheGpuByPciBusIdNotByIndex) {
  std::string why;
  auto probe = training::make_nvml_probe("cuda:0", "0000:5E:00.0", FAKE_NVML_LIBRARY, &why);
  ASSERT_NE(probe, nullptr) << why;
  EXPECT_EQ(probe->device(), "cuda:0");
  EXPECT_EQ(probe->read().memory_used.value(), int64_t{2} << 30);
  EXPECT_DOUBLE_EQ(probe->read().utilization.value(), 0.07);
  // NVML's own 8-digit domain form names the same GPU.
  probe = training::make_nvml_probe("cuda:1", "00000000:3B:00.0", FAKE_NVML_LIBRARY, &why);
  ASSERT_NE(probe, nullptr) << why;
  EXPECT_EQ(probe->read().memory_used.value(), int64_t{1} << 30);
}

TEST(Sampler, NvmlWithoutPowerClockOrTemperatureStillSamples) {
  std::string why;
  auto probe = training::make_nvml_probe("cuda:0", "0000:3B:00.0", FAKE_NVML_MINIMAL_LIBRARY, &why);
  ASSERT_NE(probe, nullptr) << why;
  const auto sample = probe->read();
  EXPECT_DOUBLE_EQ(sample.utilization.value(), 0.42);
  // No nvmlDeviceGetMemoryInfo_v2: the first version's `used`, the driver's 256 MiB included.
  EXPECT_EQ(sample.memory_used.value(), (int64_t{1} << 30) + (int64_t{256} << 20));
  EXPECT_FALSE(sample.power_watts.has_value());
  EXPECT_FALSE(sample.sm_clock_mhz.has_value());
  EXPECT_FALSE(sample.temperature_c.has_value());
}

TEST(Sampler, NvmlProblemsAreReportedNotThrown) {
  std::string why;
  EXPECT_EQ(
      training::make_nvml_probe("cuda:0", "0000:3B:00.0", "/nonexistent/libnvidia-ml.so.1", &why),
      nullptr);
  EXPECT_EQ(why.rfind("cannot load /nonexistent/libnvidia-ml.so.1", 0), 0u) << why;
  EXPECT_EQ(training::make_nvml_probe("cuda:0", "0000:3B:00.0", "libm.so.6", &why), nullptr);
  EXPECT_EQ(why, "NVML has no nvmlInit_v2");
  EXPECT_EQ(training::make_nvml_probe("cuda:3", "0000:99:00.0", FAKE_NVML_LIBRARY, &why), nullptr);
  EXPECT_EQ(why, "NVML has no GPU at PCI bus id 0000:99:00.0");
  setenv("FAKE_NVML_FAIL_INIT", "1", 1);
  EXPECT_EQ(training::make_nvml_probe("cuda:0", "0000:3B:00.0", FAKE_NVML_LIBRARY, &why), nullptr);
  unsetenv("FAKE_NVML_FAIL_INIT");
  EXPECT_EQ(why, "nvmlInit failed (no NVIDIA driver?)");
}

}  // namespace
