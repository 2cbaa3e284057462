#include "data/cifar10_binary.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "build_config.h"
#include "data/dataset.h"
#include "test_support.h"

namespace {

namespace fs = std::filesystem;

// Writes `count` records; record i has label labels[i] and every pixel byte = (i + offset) % 256
// except the plane index, which is encoded in the first byte of each plane.
void write_batch(const fs::path& file, const std::vector<int>& labels) {
  std::ofstream out(file, std::ios::binary);
  for (size_t i = 0; i < labels.size(); ++i) {
    out.put(static_cast<char>(labels[i]));
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 1024; ++p) out.put(static_cast<char>((i * 7 + c * 50 + p) % 256));
    }
  }
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const data::DataError& e) {
    return e.what();
  }
  return "no error";
}

TEST(BinaryReader, ReadsLabelsAndChannelPlanesInOrder) {
  test_support::TempDir dir;
  write_batch(dir / "a.bin", {3, 9, 0});
  write_batch(dir / "b.bin", {5});
  auto split = data::read_binary_batches({dir / "a.bin", dir / "b.bin"});
  ASSERT_EQ(split.images.sizes(), torch::IntArrayRef({4, 3, 32, 32}));
  EXPECT_EQ(split.images.dtype(), torch::kUInt8);
  EXPECT_TRUE(split.labels.equal(torch::tensor({3, 9, 0, 5}, torch::kInt64)));
  // Record 1, green plane (c=1), pixel row 2 col 5 (p = 69): (1*7 + 50 + 69) % 256.
  EXPECT_EQ(split.images[1][1][2][5].item<int>(), (7 + 50 + 69) % 256);
  // The single record of the second file restarts its own numbering at i = 0.
  EXPECT_EQ(split.images[3][2][0][0].item<int>(), 100);
}

TEST(BinaryReader, LimitStopsEarlyAcrossFiles) {
  test_support::TempDir dir;
  write_batch(dir / "a.bin", {1, 2});
  write_batch(dir / "b.bin", {3, 4});
  auto split = data::read_binary_batches({dir / "a.bin", dir / "b.bin"}, 3);
  EXPECT_TRUE(split.labels.equal(torch::tensor({1, 2, 3}, torch::kInt64)));
  // A limit inside the first file never opens the (missing) second one.
  EXPECT_EQ(data::read_binary_batches({dir / "a.bin", dir / "missing.bin"}, 2).size(), 2);
}

TEST(BinaryReader, MissingFileIsNamed) {
  test_support::TempDir dir;
  EXPECT_EQ(error_of([&] { data::read_binary_batches({dir / "data_batch_1.bin"}); }),
            (dir / "data_batch_1.bin").string() + ": file not found");
  // A link to nothing is said as one (it read "file not found", beside the link in the folder).
  fs::create_symlink(dir / "gone.bin", dir / "data_batch_2.bin");
  EXPECT_EQ(error_of([&] { data::count_binary_records({dir / "data_batch_2.bin"}); }),
            (dir / "data_batch_2.bin").string() + ": a symbolic link to nothing (its target " +
                (dir / "gone.bin").string() + " does not exist)");
}

// A folder or a loop of links where a batch file is expected was said as "file not found".
TEST(BinaryReader, AFolderOrALoopWhereAFileIsExpectedIsSaidAsSuch) {
  test_support::TempDir dir;
  fs::create_directories(dir / "data_batch_1.bin");
  EXPECT_EQ(
      error_of([&] { data::read_binary_batches({dir / "data_batch_1.bin"}); }),
      (dir / "data_batch_1.bin").string() + ": is a folder, expected a CIFAR-10 binary batch file");
  fs::create_symlink(dir / "data_batch_2.bin", dir / "data_batch_2.bin");
  EXPECT_EQ(error_of([&] { data::read_binary_batches({dir / "data_batch_2.bin"}); }),
            (dir / "data_batch_2.bin").string() + ": Too many levels of symbolic links");
}

TEST(BinaryReader, TruncatedFileIsNamedWithItsSize) {
  test_support::TempDir dir;
  write_batch(dir / "t.bin", {1, 2});
  fs::resize_file(dir / "t.bin", 3073 * 2 - 10);
  const auto message = error_of([&] { data::read_binary_batches({dir / "t.bin"}); });
  EXPECT_NE(message.find((dir / "t.bin").string() + ": size 6136 bytes is not a whole number of "
                                                    "3073-byte records"),
            std::string::npos)
      << message;
}

TEST(BinaryReader, EmptyFileIsRefused) {
  test_support::TempDir dir;
  std::ofstream(dir / "e.bin").close();
  EXPECT_NE(error_of([&] { data::read_binary_batches({dir / "e.bin"}); }).find("empty file"),
            std::string::npos);
}

TEST(BinaryReader, LabelAboveNineNamesFileAndRecord) {
  test_support::TempDir dir;
  write_batch(dir / "l.bin", {1, 2, 12});
  EXPECT_EQ(error_of([&] { data::read_binary_batches({dir / "l.bin"}); }),
            (dir / "l.bin").string() + ": record 2 has label 12, expected 0..9");
}

TEST(BinaryReader, ALaterBadFileIsReportedEvenIfEarlierOnesAreFine) {
  test_support::TempDir dir;
  write_batch(dir / "a.bin", {1});
  write_batch(dir / "b.bin", {1});
  fs::resize_file(dir / "b.bin", 100);
  EXPECT_NE(error_of([&] {
              data::read_binary_batches({dir / "a.bin", dir / "b.bin"});
            }).find("b.bin: size 100 bytes"),
            std::string::npos);
}

TEST(Dataset, FindsTheOfficialLayoutAndAppliesLimits) {
  test_support::TempDir dir;
  const auto bins = dir / "cifar-10-batches-bin";
  fs::create_directories(bins);
  for (int i = 1; i <= 5; ++i)
    write_batch(bins / ("data_batch_" + std::to_string(i) + ".bin"), {i, i});
  write_batch(bins / "test_batch.bin", {0, 1, 2});
  auto options = data::DataOptions().root(dir.path().string()).train_limit(3);
  EXPECT_EQ(data::resolve_source(options), data::Source::Binary);
  auto train = data::load_split(options, data::SplitName::Train);
  EXPECT_TRUE(train.labels.equal(torch::tensor({1, 1, 2}, torch::kInt64)));
  EXPECT_EQ(data::load_split(options, data::SplitName::Test).size(), 3);
}

// data.device_resident's card prediction counts a split without decoding it: the count is what
// load_split reads, limits and all, and a missing or truncated file is the same error.
TEST(Dataset, ASplitIsCountedAsItIsRead) {
  test_support::TempDir dir;
  for (int i = 1; i <= 5; ++i)
    write_batch(dir / ("data_batch_" + std::to_string(i) + ".bin"), {i, i, i});
  write_batch(dir / "test_batch.bin", {0, 1});
  for (const int64_t limit : {0, 1, 4, 15, 40}) {
    const auto options = data::DataOptions().root(dir.path().string()).train_limit(limit);
    EXPECT_EQ(data::split_size(options, data::SplitName::Train),
              data::load_split(options, data::SplitName::Train).size())
        << "train_limit " << limit;
  }
  const auto options = data::DataOptions().root(dir.path().string());
  EXPECT_EQ(data::split_size(options, data::SplitName::Train), 15);
  EXPECT_EQ(data::split_size(options, data::SplitName::Test), 2);
  auto synthetic = data::DataOptions().source(data::Source::Synthetic).synthetic_test_size(9);
  EXPECT_EQ(data::split_size(synthetic, data::SplitName::Test), 9);
  EXPECT_EQ(data::split_size(synthetic.test_limit(4), data::SplitName::Test), 4);
  std::ofstream(dir / "data_batch_3.bin", std::ios::binary | std::ios::app) << "x";
  EXPECT_EQ(error_of([&] { data::split_size(options, data::SplitName::Train); }),
            error_of([&] { data::load_split(options, data::SplitName::Train); }));
  EXPECT_NE(error_of([&] {
              data::split_size(options, data::SplitName::Train);
            }).find("data_batch_3.bin: size 9220 bytes"),
            std::string::npos);
  fs::remove(dir / "test_batch.bin");
  EXPECT_EQ(error_of([&] { data::split_size(options, data::SplitName::Test); }),
            error_of([&] { data::load_split(options, data::SplitName::Test); }));
}

TEST(Dataset, EmptyRootSaysHowToGetTheData) {
  test_support::TempDir dir;
  const auto message = error_of([&] {
    data::load_split(data::DataOptions().root(dir.path().string()), data::SplitName::Train);
  });
  EXPECT_NE(message.find("no CIFAR-10 found"), std::string::npos) << message;
  // The script by its path and the root one shell word (the tenth pass's F7: "scripts/..."
  // from another folder, and a root with a space, did not run as advised).
  EXPECT_NE(
      message.find("'" TRAIN_SCRIPTS_DIR "/get-data.sh' --root='" + dir.path().string() + "'"),
      std::string::npos)
      << message;
}

TEST(Dataset, SyntheticIsSeededAndSized) {
  auto options = data::DataOptions()
                     .source(data::Source::Synthetic)
                     .synthetic_train_size(40)
                     .synthetic_test_size(8)
                     .synthetic_seed(5);
  auto a = data::load_split(options, data::SplitName::Train);
  auto b = data::load_split(options, data::SplitName::Train);
  auto test = data::load_split(options, data::SplitName::Test);
  EXPECT_EQ(a.size(), 40);
  EXPECT_EQ(test.size(), 8);
  EXPECT_TRUE(a.images.equal(b.images));
  EXPECT_FALSE(a.images.narrow(0, 0, 8).equal(test.images));
  EXPECT_LE(a.labels.max().item<int64_t>(), 9);
  EXPECT_EQ(data::load_split(options.train_limit(10), data::SplitName::Train).size(), 10);
}

}  // namespace
