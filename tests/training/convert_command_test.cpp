#include "training/convert_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "build_config.h"
#include "data/cifar10_binary.h"
#include "data/dataset.h"
#include "test_support.h"
#include "training/platform/errors.h"
#include "training/tiny_run.h"

#ifdef TRAIN_HAVE_OPENCV
#include <opencv2/imgcodecs.hpp>
#endif

namespace {

namespace fs = std::filesystem;

std::string refusal_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

data::Split load(const fs::path& root, data::Source source, data::SplitName split) {
  return data::load_split(data::DataOptions().source(source).root(root.string()), split);
}

int convert(const fs::path& root, const fs::path& output) {
  training::ConvertRequest request;
  request.root = root.string();
  request.output = output.string();
  return training::convert_command(request);
}

// A conversion of `root` into `output` as given (a string: a trailing slash stays).
std::string convert_request_for_cleanup(const fs::path& root, const std::string& output) {
  training::ConvertRequest request;
  request.root = root.string();
  request.output = output;
  return refusal_of([&] { training::convert_command(request); });
}

// Everything under `dir`, as names relative to it.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    names.push_back(fs::relative(entry.path(), dir).string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Convert, AFolderThatIsAlreadyThereIsNotReplaced) {
  test_support::TempDir dir;
  fs::create_directories(dir / "root/train/a");
  fs::create_directories(dir / "root/test/a");
  fs::create_directories(dir / "out");
  std::ofstream(dir / "out/mine.txt") << "mine";
  const auto message = refusal_of([&] { convert(dir / "root", dir / "out"); });
  EXPECT_NE(message.find("out: already there; train convert writes a new folder"),
            std::string::npos)
      << message;
  EXPECT_EQ(entries(dir / "out"), (std::vector<std::string>{"mine.txt"}));
}

// Twelfth pass: OUTPUT inside ROOT's train/ or test/ was written there, a new class folder that
// every later reader of the root refused (the class folders differ). Refused before anything is
// written, however the path is spelt; beside the splits it is taken.
TEST(Convert, AnOutputInsideTheRootsSplitsIsRefused) {
  test_support::TempDir dir;
  fs::create_directories(dir / "root/train/a");
  fs::create_directories(dir / "root/test/a");
  for (const fs::path& output :
       {dir / "root/train/bin", dir / "root/test/a/bin", dir / "root/../root/train/bin"}) {
    const auto message = refusal_of([&] { convert(dir / "root", output); });
    EXPECT_NE(message.find(output.string() + ": inside "), std::string::npos) << message;
  }
  EXPECT_EQ(entries(dir / "root"),
            (std::vector<std::string>{"test", "test/a", "train", "train/a"}));
  std::ofstream(dir / "file") << "mine";
  const auto message = refusal_of([&] { convert(dir / "root", dir / "file/bin"); });
  EXPECT_EQ(message, (dir / "file/bin").string() + ": cannot create the folder (" +
                         (dir / "file").string() + " is not a folder)");
}

// The folder is created where mkdir would create it (a trailing slash is the same folder); a path
// that cannot be created says why; a temporary folder a killed conversion left is removed, one of
// a live process or holding other files is not.
TEST(Convert, TheOutputIsTakenAsGivenAndStaleTemporariesOfDeadConversionsGo) {
  test_support::TempDir dir;
  fs::create_directories(dir / "root/train/a");
  fs::create_directories(dir / "root/test/a");
  EXPECT_NE(refusal_of([&] {
              convert(dir / "root", dir / std::string(300, 'x'));
            }).find(": cannot be created (File name too long)"),
            std::string::npos);
  fs::create_directories(dir / ".train-convert.999999999.abcdef");  // no such process
  std::ofstream(dir / ".train-convert.999999999.abcdef/data_batch_1.bin") << "partial";
  fs::create_directories(dir / ".train-convert.999999998.abcdef");
  std::ofstream(dir / ".train-convert.999999998.abcdef/mine.txt") << "not ours";
  const auto live = ".train-convert." + std::to_string(::getpid()) + ".abcdef";
  fs::create_directories(dir / live);
  std::ofstream(dir / live / "data_batch_1.bin") << "in progress";
  // The root's images are missing, so the conversion itself is refused: after the clean-up.
  convert_request_for_cleanup(dir / "root", dir.path().string() + "/out/");
  EXPECT_FALSE(fs::exists(dir / ".train-convert.999999999.abcdef"));
  EXPECT_TRUE(fs::exists(dir / ".train-convert.999999998.abcdef/mine.txt"));
  EXPECT_FALSE(fs::exists(dir / ".train-convert.999999998.abcdef/data_batch_1.bin"));
  EXPECT_TRUE(fs::exists(dir / live / "data_batch_1.bin"));
}

#ifdef TRAIN_HAVE_OPENCV

// 32x32 images whose pixels are a function of `seed`, with 8 bits per channel unless `depth16`.
cv::Mat pattern(int seed, bool depth16 = false) {
  cv::Mat image(32, 32, depth16 ? CV_16UC3 : CV_8UC3);
  for (int y = 0; y < 32; ++y) {
    for (int x = 0; x < 32; ++x) {
      for (int c = 0; c < 3; ++c) {
        const int value = (seed * 37 + y * 7 + x * 3 + c * 101) % 256;
        if (depth16) {
          image.at<cv::Vec3w>(y, x)[c] = static_cast<uint16_t>(value * 257 + (x % 2) * 128);
        } else {
          image.at<cv::Vec3b>(y, x)[c] = static_cast<uint8_t>(value);
        }
      }
    }
  }
  return image;
}

void write_image(const fs::path& file, const cv::Mat& image, const std::string& format = "") {
  fs::create_directories(file.parent_path());
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(cv::imencode(format.empty() ? file.extension().string() : format, image, bytes));
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// A root in every form train accepts: PNG at 8 and 16 bits, JPEG, TIFF, WebP (lossless), BMP, a
// JPEG without an extension; and a hidden file train skips (it would shift the later images).
void write_mixed_root(const fs::path& root) {
  int seed = 0;
  for (const char* split : {"train", "test"}) {
    for (const char* name : {"bird", "cat", "deer"}) {
      const auto folder = root / split / name;
      write_image(folder / "a.png", pattern(++seed));
      write_image(folder / "b.png", pattern(++seed, true));
      write_image(folder / "c.jpg", pattern(++seed));
      write_image(folder / "d.tif", pattern(++seed));
      write_image(folder / "e.webp", pattern(++seed));
      write_image(folder / "f.bmp", pattern(++seed));
      write_image(folder / "g", pattern(++seed), ".jpg");
      std::ofstream(folder / ".hidden.png") << "not an image";
    }
  }
}

TEST(Convert, TheConversionHoldsTheImagesLabelsAndPixelsTrainReadsFromTheFolders) {
  test_support::TempDir dir;
  write_mixed_root(dir / "root");
  EXPECT_EQ(convert(dir / "root", dir / "bin"), training::kExitOk);
  EXPECT_EQ(entries(dir / "bin"),
            (std::vector<std::string>{"batches.meta.txt", "data_batch_1.bin", "data_batch_2.bin",
                                      "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin",
                                      "test_batch.bin"}));
  std::ifstream meta(dir / "bin/batches.meta.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(meta), {}), "bird\ncat\ndeer\n");
  for (const auto split : {data::SplitName::Train, data::SplitName::Test}) {
    const auto folders = load(dir / "root", data::Source::Images, split);
    const auto converted = load(dir / "bin", data::Source::Binary, split);
    ASSERT_EQ(folders.size(), 21);
    EXPECT_TRUE(folders.images.equal(converted.images));
    EXPECT_TRUE(folders.labels.equal(converted.labels));
  }
  // 21 training records cut into 5 files, the longer ones first: 5, 4, 4, 4, 4.
  EXPECT_EQ(fs::file_size(dir / "bin/data_batch_1.bin"), 5 * data::kBinaryRecordBytes);
  EXPECT_EQ(fs::file_size(dir / "bin/data_batch_5.bin"), 4 * data::kBinaryRecordBytes);
}

// Round 4: the output folder was mkdtemp's 0700 whatever the umask (unreadable to the other users
// of a shared data root), and a full disk named the removed temporary ("what was written before
// is intact"). The folder is made as mkdir makes it; a full disk names the output.
TEST(Convert, TheOutputHonoursTheUmaskAndAFullDiskNamesIt) {
  test_support::TempDir dir;
  write_mixed_root(dir / "root");
  const mode_t before = ::umask(027);
  const int code = convert(dir / "root", dir / "bin");
  ::umask(before);
  ASSERT_EQ(code, training::kExitOk);
  EXPECT_EQ(fs::status(dir / "bin").permissions() & fs::perms::all,
            fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  // A file-size limit stands in for the full disk (EFBIG, as ENOSPC: exit 5).
  const std::string out = (dir / "out").string();
  FILE* pipe = popen(("ulimit -f 20; " + std::string(TRAIN_BINARY) + " convert " +
                      (dir / "root").string() + " " + out + " 2>&1")
                         .c_str(),
                     "r");
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), training::kExitCannotWrite) << output;
  EXPECT_NE(output.find(out + ": could not be written (File too large); nothing was created"),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find(".train-convert"), std::string::npos) << output;
  EXPECT_EQ(output.find("intact"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_NE(entry.path().filename().string().rfind(".train-convert", 0), 0u) << entry.path();
  }
}

TEST(Convert, TrainingOnTheFoldersAndOnTheirConversionGivesTheSameMetrics) {
  test_support::TempDir dir;
  write_mixed_root(dir / "root");
  ASSERT_EQ(convert(dir / "root", dir / "bin"), training::kExitOk);
  std::vector<nlohmann::ordered_json> rows[2];
  int n = 0;
  for (const auto& [source, root] :
       {std::pair{data::Source::Images, dir / "root"}, {data::Source::Binary, dir / "bin"}}) {
    auto config = tiny_run::tiny("");
    config.data.dataset.source(source).root(root.string());
    config.training.epochs = 2;
    config.training.batch_size = 8;
    config.training.memory_format = c10::MemoryFormat::Contiguous;  // auto times both: may differ
    rows[n] = tiny_run::train(config, dir / ("run-" + std::to_string(n)));
    ++n;
  }
  ASSERT_EQ(rows[0].size(), 2u);
  ASSERT_EQ(rows[1].size(), 2u);
  for (size_t epoch = 0; epoch < 2; ++epoch) {
    for (const char* key : {"train_loss", "train_acc", "test_loss", "test_acc"}) {
      EXPECT_EQ(rows[0][epoch][key], rows[1][epoch][key]) << key << " in epoch " << epoch + 1;
    }
  }
}

TEST(Convert, WhatTrainRefusesIsRefusedAndNothingIsWritten) {
  test_support::TempDir dir;
  // Every test class empty: train refuses the split; a converter must not write 0 records.
  write_image(dir / "empty/train/cat/a.png", pattern(1));
  fs::create_directories(dir / "empty/test/cat");
  // A test split without one of the training classes: every later label would shift.
  write_image(dir / "classes/train/bird/a.png", pattern(1));
  write_image(dir / "classes/train/cat/a.png", pattern(2));
  write_image(dir / "classes/test/cat/a.png", pattern(3));
  // A file that is no image, and an image of another size.
  write_image(dir / "junk/train/cat/a.png", pattern(1));
  std::ofstream(dir / "junk/train/cat/notes.txt") << "notes";
  write_image(dir / "junk/test/cat/a.png", pattern(2));
  write_image(dir / "small/train/cat/a.png", cv::Mat(16, 16, CV_8UC3, cv::Scalar(1, 2, 3)));
  write_image(dir / "small/test/cat/a.png", pattern(2));
  // Eleven classes: a record's label byte holds 0..9 only.
  for (int c = 0; c < 11; ++c) {
    write_image(dir / "eleven/train" / ("c" + std::to_string(c)) / "a.png", pattern(c));
    write_image(dir / "eleven/test" / ("c" + std::to_string(c)) / "a.png", pattern(c));
  }
  for (const char* root : {"empty", "classes", "junk", "small"}) {
    const auto train_says = refusal_of([&] {
      load(dir / root, data::Source::Images, data::SplitName::Train);
      load(dir / root, data::Source::Images, data::SplitName::Test);
    });
    ASSERT_NE(train_says, "no error") << root;
    EXPECT_EQ(refusal_of([&] { convert(dir / root, dir / (std::string(root) + "-bin")); }),
              train_says)
        << root;
  }
  EXPECT_NE(refusal_of([&] {
              convert(dir / "eleven", dir / "eleven-bin");
            }).find("11 class folders; the binary format holds labels 0..9"),
            std::string::npos);
  // Nothing beside the roots: no output folder, no temporary.
  EXPECT_EQ(entries(dir.path()).size(),
            entries(dir / "empty").size() + entries(dir / "classes").size() +
                entries(dir / "junk").size() + entries(dir / "small").size() +
                entries(dir / "eleven").size() + 5);
}

#endif

}  // namespace
