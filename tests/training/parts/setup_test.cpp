#include "training/parts/setup.h"

#include <gtest/gtest.h>

#include "training/parts/components.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"

namespace {

training::Config config_with(const std::string& training) {
  return training::parse_config(
      "model: {arch: resnet18, stem: cifar}\ntraining: {device: cpu, batch_size: 4" + training +
          "}\n",
      "setup");
}

// A device the machine cannot give is refused as the key that asked for it, the platform's fact
// after it.
TEST(SetUp, AnUnusableDeviceIsRefusedNamingTrainingDevice) {
  auto config = config_with("");
  config.training.device = "cuda:7";
  if (training::cuda_unavailable_reason(7).empty()) GTEST_SKIP() << "this machine has cuda:7";
  try {
    training::set_up_device(config);
    FAIL() << "cuda:7 was accepted";
  } catch (const training::KeyError& e) {
    EXPECT_EQ(e.key(), "training.device");
    EXPECT_NE(std::string(e.what()).find("training.device: 'cuda:7' requested, but"),
              std::string::npos)
        << e.what();
  }
}

// memory.limit is set by the set-up: a limit above the device's memory is refused, naming it.
TEST(SetUp, AMemoryLimitAboveTheDeviceIsRefused) {
  auto config = config_with("");
  config.memory.limit = training::total_memory(torch::Device(torch::kCPU)) * 2;
  try {
    training::set_up_device(config);
    FAIL() << "a limit above the machine's memory was accepted";
  } catch (const training::KeyError& e) {
    EXPECT_EQ(e.key(), "memory.limit");
  }
  config.memory.limit = 0;
  EXPECT_TRUE(training::set_up_device(config).is_cpu());
}

// The process group's refusals, facts below, are said at the set-up with the key that asked, and
// before any peer is waited for (no other rank exists here: a wait would time out).
TEST(SetUp, AGroupsRefusalsAreSaidWithTheirKeys) {
  training::LaunchEnv two;
  two.world_size = 2;
  two.master_port = training::free_loopback_port();
  training::DistributedOptions options;
  options.timeout_seconds = 1;
  options.backend = training::DistributedBackend::Nccl;
  const auto refusal = [&](const char* key) {
    try {
      training::join_group(two, options, torch::kCPU);
    } catch (const training::KeyError& e) {
      EXPECT_EQ(e.key(), key);
      return std::string(e.what());
    }
    return std::string("(no KeyError)");
  };
  EXPECT_EQ(refusal("distributed.backend"),
            "distributed.backend: nccl needs a CUDA device; this rank trains on cpu; set it to "
            "gloo");
  options.backend = training::DistributedBackend::Gloo;
  options.interface = "nope0";
  EXPECT_EQ(refusal("distributed.interface")
                .rfind("distributed.interface: this host has no network interface 'nope0'", 0),
            0u);
  options.interface = "lo";
  two.gloo_socket_ifname = "eth9";
  EXPECT_EQ(refusal("distributed.interface"),
            "distributed.interface: 'lo' and GLOO_SOCKET_IFNAME=eth9 disagree; set one of them");
}

// What of the set-up a use takes: the loader bench runs no step, so the step's checks and limit
// are not its; a study's settings check their own precision, not training.precision.
TEST(SetUp, EachUseTakesItsPartOfTheSetUp) {
  auto config = config_with("");
  config.memory.limit = training::total_memory(torch::Device(torch::kCPU)) * 2;
  config.memory.snapshot = true;  // the CPU has no allocator history
  EXPECT_TRUE(training::set_up_device(config, training::DeviceUse::Loader).is_cpu());
  EXPECT_THROW(training::set_up_device(config, training::DeviceUse::Study), training::KeyError);
  EXPECT_THROW(training::set_up_device(config, training::DeviceUse::Step), training::KeyError);
}

// The warm-up rule: whole optimizer steps until one is taken, so the momentum exists after it.
TEST(SetUp, WarmUpTakesOneWholeStepAndLeavesTheMomentum) {
  for (const int64_t micro_batches : {1, 3}) {
    auto config = config_with("");
    const torch::Device cpu(torch::kCPU);
    auto parts = training::build_step_parts(config, cpu);
    const auto [images, labels] = training::synthetic_batch(config, cpu);
    const auto options = training::step_options(config).accumulate_steps(micro_batches);
    const auto before = parts.model->parameters().front().clone();
    EXPECT_EQ(training::warm_up(parts, options, images, labels, cpu), 1);
    EXPECT_FALSE(torch::equal(before, parts.model->parameters().front()));
    EXPECT_FALSE(parts.optimizer->state().empty()) << micro_batches << " micro-batches";
  }
}

}  // namespace
