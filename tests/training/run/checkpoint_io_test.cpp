#include "training/run/checkpoint_io.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <functional>
#include <utility>
#include <vector>

#include "models/resnet.h"
#include "test_support.h"
#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"
#include "training/step/optim.h"

namespace {

namespace fs = std::filesystem;

struct Setup {
  models::ResNet model;
  std::unique_ptr<torch::optim::SGD> optimizer;
};

Setup make_setup(int64_t seed, models::Stem stem = models::Stem::ImageNet) {
  torch::manual_seed(seed);
  models::ResNet model(models::ResNetOptions(18).stem(stem).num_classes(10));
  auto optimizer = training::make_sgd(*model, training::OptimizerOptions());
  return {model, std::move(optimizer)};
}

void one_step(Setup& s) {
  auto loss = torch::nn::functional::cross_entropy(s.model->forward(torch::randn({8, 3, 32, 32})),
                                                   torch::randint(0, 10, {8}, torch::kInt64));
  s.optimizer->zero_grad();
  loss.backward();
  s.optimizer->step();
}

std::string user_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const training::UserError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Checkpoint, RoundTripRestoresModelOptimizerStateAndRng) {
  test_support::TempDir dir;
  auto a = make_setup(1);
  one_step(a);
  training::TrainState state;
  state.epoch = 3;
  state.step = 42;
  state.batch_in_epoch = 5;
  state.loss_sum = torch::tensor(12.5, torch::kFloat64);
  state.correct = torch::tensor(17, torch::kInt64);
  state.seen = 40;
  state.train_seconds = 1.5;
  state.batch_size = 8;
  torch::manual_seed(77);
  training::save_checkpoint(dir / "c.pt", *a.model, *a.optimizer, state,
                            {"training: {}\n", "{\"checkpointing\": 1}"});
  const auto expected_random = torch::rand({4});

  auto b = make_setup(2);
  auto restored = training::load_checkpoint(dir / "c.pt", *b.model, *b.optimizer, torch::kCPU);
  EXPECT_EQ(restored.epoch, 3);
  EXPECT_EQ(restored.step, 42);
  EXPECT_EQ(restored.batch_in_epoch, 5);
  EXPECT_EQ(restored.seen, 40);
  EXPECT_DOUBLE_EQ(restored.train_seconds, 1.5);
  EXPECT_DOUBLE_EQ(restored.loss_sum.item<double>(), 12.5);
  EXPECT_EQ(restored.correct.item<int64_t>(), 17);
  EXPECT_TRUE(torch::rand({4}).equal(expected_random));  // the CPU RNG continues where it was
  const auto inputs = training::checkpoint_inputs(dir / "c.pt");
  EXPECT_EQ(inputs.config_yaml, "training: {}\n");
  EXPECT_EQ(inputs.decisions_json, "{\"checkpointing\": 1}");  // stored as given, read as text

  auto pa = a.model->named_parameters(), pb = b.model->named_parameters();
  for (const auto& p : pa) EXPECT_TRUE(p.value().equal(pb[p.key()])) << p.key();
  auto ba = a.model->named_buffers(), bb = b.model->named_buffers();
  for (const auto& x : ba) EXPECT_TRUE(x.value().equal(bb[x.key()])) << x.key();
  // Momentum buffers come back too: the next step is identical.
  torch::manual_seed(5);
  one_step(a);
  torch::manual_seed(5);
  one_step(b);
  EXPECT_TRUE(a.model->named_parameters()["layer1.0.conv1.weight"].equal(
      b.model->named_parameters()["layer1.0.conv1.weight"]));
}

TEST(Checkpoint, GarbageFileIsRefusedByName) {
  test_support::TempDir dir;
  std::ofstream(dir / "bad.pt") << "not a checkpoint";
  auto s = make_setup(1);
  const auto message = user_error_of(
      [&] { training::load_checkpoint(dir / "bad.pt", *s.model, *s.optimizer, torch::kCPU); });
  EXPECT_EQ(message.rfind((dir / "bad.pt").string() + ": not a readable checkpoint", 0), 0u)
      << message;
}

TEST(Checkpoint, ADifferentModelIsRefusedNamingTheTensor) {
  test_support::TempDir dir;
  auto imagenet = make_setup(1, models::Stem::ImageNet);
  training::save_checkpoint(dir / "c.pt", *imagenet.model, *imagenet.optimizer, {}, {});
  auto cifar = make_setup(1, models::Stem::Cifar);
  EXPECT_EQ(user_error_of([&] {
              training::load_checkpoint(dir / "c.pt", *cifar.model, *cifar.optimizer, torch::kCPU);
            }),
            (dir / "c.pt").string() +
                ": tensor 'conv1.weight' has shape [64, 3, 7, 7], the model expects [64, 3, 3, 3]");
}

// Round 5: a resume with --set optimizer.momentum=0 ran with the checkpoint's momentum 0.9 (and its
// buffers) while its step was predicted without them; it ran out of memory in the next epoch. The
// config's options hold, and no momentum buffer is kept where the config's momentum is 0.
TEST(Checkpoint, TheConfigsOptimizerOptionsHoldOverTheCheckpointsAndUnusedBuffersGo) {
  test_support::TempDir dir;
  auto a = make_setup(1);
  one_step(a);  // momentum buffers made
  training::TrainState state;
  state.batch_size = 8;
  training::save_checkpoint(dir / "c.pt", *a.model, *a.optimizer, state, {});
  ASSERT_FALSE(a.optimizer->state().empty());

  torch::manual_seed(1);
  models::ResNet model(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
  const auto plain = training::make_sgd(
      *model, training::OptimizerOptions().momentum(0).nesterov(false).weight_decay(0.01));
  training::load_checkpoint(dir / "c.pt", *model, *plain, torch::kCPU);
  for (const auto& group : plain->param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    EXPECT_EQ(o.momentum(), 0);
    EXPECT_FALSE(o.nesterov());
  }
  EXPECT_EQ(static_cast<const torch::optim::SGDOptions&>(plain->param_groups()[0].options())
                .weight_decay(),
            0.01);
  EXPECT_TRUE(plain->state().empty()) << "momentum buffers held that momentum 0 never reads";

  auto b = make_setup(2);  // momentum 0.9 as saved: its buffers come back
  training::load_checkpoint(dir / "c.pt", *b.model, *b.optimizer, torch::kCPU);
  EXPECT_EQ(b.optimizer->state().size(), a.optimizer->state().size());

  // Another grouping of the parameters is refused by the check a resume makes before measuring.
  torch::manual_seed(1);
  models::ResNet other(models::ResNetOptions(18).stem(models::Stem::ImageNet).num_classes(10));
  const auto regrouped =
      training::make_sgd(*other, training::OptimizerOptions().decay_norm_and_bias(true));
  EXPECT_NE(user_error_of([&] {
              training::check_checkpoint_model(dir / "c.pt", *other, *regrouped);
            }).find(": optimizer state does not fit"),
            std::string::npos);
}

// What is read back is checked as train wrote it (issue 57): a checkpoint whose frame is whole but
// whose counts train never writes (a negative epoch, no batch size) is refused naming the entry.
TEST(Checkpoint, CountsTrainNeverWritesAreRefusedNamingTheEntry) {
  test_support::TempDir dir;
  auto a = make_setup(1);
  const std::vector<std::pair<std::string, std::function<void(training::TrainState&)>>> cases = {
      {"'epoch' is -1, expected at least 0", [](auto& s) { s.epoch = -1; }},
      {"'batch_size' is 0, expected at least 1", [](auto& s) { s.batch_size = 0; }},
      {"'world_size' is 0, expected at least 1", [](auto& s) { s.world_size = 0; }},
      {"'train_seconds' is -2.5, expected at least 0", [](auto& s) { s.train_seconds = -2.5; }}};
  for (const auto& [entry, edit] : cases) {
    training::TrainState state;
    state.batch_size = 8;
    edit(state);
    training::save_checkpoint(dir / "c.pt", *a.model, *a.optimizer, state, {});
    EXPECT_EQ(
        user_error_of(
            [&] { training::load_checkpoint(dir / "c.pt", *a.model, *a.optimizer, torch::kCPU); }),
        (dir / "c.pt").string() + ": checkpoint entry " + entry + " (train never writes it so)");
  }
}

TEST(Checkpoint, FindCheckpointAcceptsRunDirOrFile) {
  test_support::TempDir dir;
  EXPECT_EQ(user_error_of([&] { training::find_checkpoint(dir.path()); }),
            (dir / "checkpoint.pt").string() + ": missing; no checkpoint to resume from");
  std::ofstream(dir / "checkpoint.pt") << "x";
  EXPECT_EQ(training::find_checkpoint(dir.path()), dir / "checkpoint.pt");
  EXPECT_EQ(training::find_checkpoint(dir / "checkpoint.pt"), dir / "checkpoint.pt");
}

// The frame around the archive: any change to a byte is found before LibTorch reads it.
TEST(CheckpointFrame, RoundTripsAndRefusesEveryDamage) {
  const std::string payload = "PK\x03\x04 stands in for a torch archive " + std::string(1000, 'w');
  const std::string framed = training::frame_checkpoint(payload);
  ASSERT_EQ(framed.size(), training::kCheckpointHeaderBytes + payload.size());
  EXPECT_EQ(framed.substr(0, 8), "TRNCKPT\n");
  EXPECT_EQ(training::verified_payload(framed, "c.pt"), payload);

  auto refused = [](const std::string& bytes) {
    return user_error_of([&] { training::verified_payload(bytes, "c.pt"); });
  };
  // A flipped bit anywhere: in the payload, in the stored digest, in the length, in the magic.
  for (size_t at :
       {framed.size() - 1, training::kCheckpointHeaderBytes, size_t{30}, size_t{12}, size_t{0}}) {
    std::string damaged = framed;
    damaged[at] ^= 0x04;
    EXPECT_NE(refused(damaged), "no error") << "byte " << at;
    EXPECT_EQ(refused(damaged).rfind("c.pt: ", 0), 0u) << refused(damaged);
  }
  std::string flipped = framed;
  flipped[framed.size() / 2] ^= 0x01;
  EXPECT_EQ(refused(flipped).rfind("c.pt: damaged checkpoint: SHA-256 ", 0), 0u)
      << refused(flipped);
  EXPECT_EQ(refused(framed.substr(0, framed.size() - 1)),
            "c.pt: damaged checkpoint: the header says 1035 payload bytes, the file holds 1034 "
            "(truncated or extended); it was not loaded");
  EXPECT_EQ(refused(framed.substr(0, 10)),
            "c.pt: not a readable checkpoint (no TRNCKPT header: not written by train)");
  EXPECT_EQ(refused(payload),
            "c.pt: not a readable checkpoint (no TRNCKPT header: not written by train)");
  std::string other_version = framed;
  other_version[8] = 7;
  EXPECT_EQ(refused(other_version), "c.pt: checkpoint frame version 7, this build reads version 3");
}

TEST(CheckpointFrame, AWrittenCheckpointIsVerifiedAndLoads) {
  test_support::TempDir dir;
  auto s = make_setup(1);
  training::TrainState state;
  state.batch_size = 32;
  training::save_checkpoint(dir / "c.pt", *s.model, *s.optimizer, state, {"model: {}\n", ""});
  const std::string bytes = test_support::read_text(dir / "c.pt");
  EXPECT_EQ(bytes.substr(0, 8), "TRNCKPT\n");
  EXPECT_NO_THROW(training::verified_payload(bytes, "c.pt"));
  auto t = make_setup(2);
  EXPECT_EQ(training::load_checkpoint(dir / "c.pt", *t.model, *t.optimizer, torch::kCPU).batch_size,
            32);
  EXPECT_EQ(training::checkpoint_inputs(dir / "c.pt").config_yaml, "model: {}\n");
}

// Issue 51, a ninth pass: a stop at an epoch's end was "stopped by signal in epoch 3 after step 8"
// in train.log and "after epoch 2 (step 8)" in report.md; one wording for both.
TEST(Checkpoint, APositionIsSaidOneWayForTheLogAndTheReports) {
  training::TrainState state;
  state.epoch = 2;
  state.step = 8;
  EXPECT_EQ(training::position_text(state), "after epoch 2 (step 8)");
  state.batch_in_epoch = 2;
  state.step = 10;
  EXPECT_EQ(training::position_text(state), "in epoch 3 after step 10");
}

}  // namespace
