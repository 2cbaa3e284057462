#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "models/resnet.h"
#include "test_support.h"
#include "training/atomic_file.h"
#include "training/checkpoint_io.h"
#include "training/errors.h"
#include "training/optim.h"

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
  torch::manual_seed(77);
  training::save_checkpoint(dir / "c.pt", *a.model, *a.optimizer, state, "training: {}\n");
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
  EXPECT_EQ(training::checkpoint_config(dir / "c.pt"), "training: {}\n");

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
  training::save_checkpoint(dir / "c.pt", *imagenet.model, *imagenet.optimizer, {}, "");
  auto cifar = make_setup(1, models::Stem::Cifar);
  EXPECT_EQ(user_error_of([&] {
              training::load_checkpoint(dir / "c.pt", *cifar.model, *cifar.optimizer, torch::kCPU);
            }),
            (dir / "c.pt").string() +
                ": tensor 'conv1.weight' has shape [64, 3, 7, 7], the model expects [64, 3, 3, 3]");
}

TEST(Checkpoint, FindCheckpointAcceptsRunDirOrFile) {
  test_support::TempDir dir;
  EXPECT_EQ(user_error_of([&] { training::find_checkpoint(dir.path()); }),
            (dir / "checkpoint.pt").string() + ": no checkpoint to resume from");
  std::ofstream(dir / "checkpoint.pt") << "x";
  EXPECT_EQ(training::find_checkpoint(dir.path()), dir / "checkpoint.pt");
  EXPECT_EQ(training::find_checkpoint(dir / "checkpoint.pt"), dir / "checkpoint.pt");
}

TEST(AtomicFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  test_support::TempDir dir;
  training::write_file_atomically(dir / "f.txt", "old");
  EXPECT_THROW(training::replace_file_atomically(dir / "f.txt",
                                                 [](const fs::path& temporary) {
                                                   std::ofstream(temporary) << "half";
                                                   throw std::runtime_error("disk full");
                                                 }),
               std::runtime_error);
  EXPECT_EQ(test_support::read_text(dir / "f.txt"), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

}  // namespace
