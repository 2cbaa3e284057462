#include "data/image_folder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "build_config.h"
#include "data/dataset.h"
#include "test_support.h"

#ifdef TRAIN_HAVE_OPENCV
#include <opencv2/imgcodecs.hpp>
#endif

namespace {

namespace fs = std::filesystem;

std::string folder_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const data::DataError& e) {
    return e.what();
  }
  return "no error";
}

#ifdef TRAIN_HAVE_OPENCV

// A PNG (lossless) whose pixels are all (r, g, b), of the given size.
void write_png(const fs::path& file, int r, int g, int b, int side = 32) {
  fs::create_directories(file.parent_path());
  cv::Mat image(side, side, CV_8UC3, cv::Scalar(b, g, r));  // OpenCV stores BGR
  ASSERT_TRUE(cv::imwrite(file.string(), image));
}

TEST(ImageFolder, ClassesAreSortedFolderNamesAndImagesAreInterleaved) {
  test_support::TempDir dir;
  write_png(dir / "train/zebra/0.png", 10, 20, 30);
  write_png(dir / "train/zebra/1.png", 11, 21, 31);
  write_png(dir / "train/apple/0.png", 40, 50, 60);
  write_png(dir / "train/apple/1.png", 41, 51, 61);
  write_png(dir / "train/apple/2.png", 42, 52, 62);
  EXPECT_EQ(data::image_folder_classes(dir / "train"),
            (std::vector<std::string>{"apple", "zebra"}));
  auto split = data::read_image_folder(dir / "train");
  ASSERT_EQ(split.images.sizes(), torch::IntArrayRef({5, 3, 32, 32}));
  // Round robin: apple/0, zebra/0, apple/1, zebra/1, apple/2.
  EXPECT_TRUE(split.labels.equal(torch::tensor({0, 1, 0, 1, 0}, torch::kInt64)));
  // RGB channel order, CHW layout.
  EXPECT_EQ(split.images[1][0][7][9].item<int>(), 10);
  EXPECT_EQ(split.images[1][1][7][9].item<int>(), 20);
  EXPECT_EQ(split.images[1][2][7][9].item<int>(), 30);
  EXPECT_EQ(split.images[4][0][0][0].item<int>(), 42);
}

TEST(ImageFolder, LimitKeepsTheSubsetClassBalanced) {
  test_support::TempDir dir;
  for (int i = 0; i < 4; ++i) {
    for (const char* c : {"a", "b", "c"})
      write_png(dir / "train" / c / (std::to_string(i) + ".png"), i, i, i);
  }
  auto split = data::read_image_folder(dir / "train", 6);
  EXPECT_TRUE(split.labels.equal(torch::tensor({0, 1, 2, 0, 1, 2}, torch::kInt64)));
}

TEST(ImageFolder, UndecodableImageIsNamed) {
  test_support::TempDir dir;
  write_png(dir / "train/a/0.png", 1, 2, 3);
  std::ofstream(dir / "train/a/1.jpg") << "this is not a JPEG";
  EXPECT_EQ(folder_error_of([&] { data::read_image_folder(dir / "train"); }),
            (dir / "train/a/1.jpg").string() + ": not a decodable image");
}

TEST(ImageFolder, WrongImageSizeIsNamed) {
  test_support::TempDir dir;
  write_png(dir / "train/a/0.png", 1, 2, 3, 16);
  EXPECT_EQ(folder_error_of([&] { data::read_image_folder(dir / "train"); }),
            (dir / "train/a/0.png").string() + ": image is 16x16, expected 32x32");
}

TEST(ImageFolder, EmptyFileIsNamed) {
  test_support::TempDir dir;
  fs::create_directories(dir / "train/a");
  std::ofstream(dir / "train/a/0.png").close();
  EXPECT_EQ(folder_error_of([&] { data::read_image_folder(dir / "train"); }),
            (dir / "train/a/0.png").string() + ": not a decodable image");
}

// A dangling symbolic link among the images was skipped without a word.
TEST(ImageFolder, ADanglingSymbolicLinkIsNamed) {
  test_support::TempDir dir;
  write_png(dir / "train/a/0.png", 1, 2, 3);
  fs::create_symlink(dir / "gone.png", dir / "train/a/1.png");
  EXPECT_EQ(folder_error_of([&] { data::read_image_folder(dir / "train"); }),
            (dir / "train/a/1.png").string() + ": a symbolic link to nothing (its target " +
                (dir / "gone.png").string() + " does not exist); remove it or restore the image");
}

TEST(ImageFolder, RealJpegSliceDecodes) {
  REAL_DATA_ROOT_OR_SKIP(root);
  auto split = data::read_image_folder(root / "test", 200);
  ASSERT_EQ(split.images.sizes(), torch::IntArrayRef({200, 3, 32, 32}));
  // 10 classes, interleaved, 20 of each.
  EXPECT_TRUE(split.labels.equal(torch::arange(10, torch::kInt64).repeat({20})));
  EXPECT_EQ(torch::bincount(split.labels).min().item<int64_t>(), 20);
  // Real photos: per-channel means near CIFAR-10's (0.49, 0.48, 0.45) * 255, with real spread.
  auto mean = split.images.to(torch::kFloat32).mean({0, 2, 3});
  for (int c = 0; c < 3; ++c) {
    EXPECT_GT(mean[c].item<float>(), 90.0f);
    EXPECT_LT(mean[c].item<float>(), 150.0f);
  }
  EXPECT_GT(split.images.to(torch::kFloat32).std().item<float>(), 40.0f);
  EXPECT_EQ(data::image_folder_classes(root / "train"),
            (std::vector<std::string>{"airplane", "automobile", "bird", "cat", "deer", "dog",
                                      "frog", "horse", "ship", "truck"}));
}

#else

TEST(ImageFolder, RefusesClearlyWithoutOpenCV) {
  test_support::TempDir dir;
  fs::create_directories(dir / "train/a");
  const auto message = folder_error_of([&] { data::read_image_folder(dir / "train"); });
  EXPECT_NE(message.find("this build has no OpenCV"), std::string::npos) << message;
  EXPECT_NE(message.find("train convert"), std::string::npos) << message;
}

#endif

TEST(ImageFolder, FolderWithoutClassesIsRefused) {
  test_support::TempDir dir;
  fs::create_directories(dir / "train");
  EXPECT_EQ(folder_error_of([&] { data::image_folder_classes(dir / "train"); }),
            (dir / "train").string() + ": no class folders, expected <class>/<image> inside");
}

// A test split missing a class folder would shift every later label by one: refused, naming it.
TEST(ImageFolder, SplitsWithDifferentClassFoldersAreRefused) {
  test_support::TempDir dir;
  for (const char* name : {"bird", "cat", "dog"}) fs::create_directories(dir / "train" / name);
  for (const char* name : {"bird", "dog", "emu"}) fs::create_directories(dir / "test" / name);
  const auto options = data::DataOptions().source(data::Source::Images).root(dir.path().string());
  const std::string expected = (dir / "test").string() + ": its class folders differ from " +
                               (dir / "train").string() +
                               "'s (missing 'cat'; extra 'emu'); a class's label is its folder's "
                               "position, so every later label would shift";
  EXPECT_EQ(folder_error_of([&] { data::load_split(options, data::SplitName::Train); }), expected);
  EXPECT_EQ(folder_error_of([&] { data::load_split(options, data::SplitName::Test); }), expected);
  EXPECT_EQ(folder_error_of([&] { data::split_size(options, data::SplitName::Train); }), expected);
}

// A class folder behind a link to nothing was skipped: one class fewer, every later label shifted,
// and nothing said. Every link that cannot be followed is refused, naming it, a loop as a loop;
// hidden entries are skipped, links or not.
TEST(ImageFolder, ALinkThatCannotBeFollowedIsNamedNeverSkipped) {
  test_support::TempDir dir;
  for (const char* split : {"train", "test"}) {
    fs::create_directories(dir / split / "ant");
    std::ofstream(dir / split / "ant" / "0.jpg");
    fs::create_symlink(dir / "unmounted" / split, dir / split / "bird");
    fs::create_symlink(dir / "nowhere", dir / split / ".hidden");
  }
  const auto options = data::DataOptions().source(data::Source::Images).root(dir.path().string());
  const std::string dangling = (dir / "train/bird").string() +
                               ": a symbolic link to nothing (its target " +
                               (dir / "unmounted/train").string() +
                               " does not exist); remove it or restore the class folder";
  EXPECT_EQ(folder_error_of([&] { data::split_size(options, data::SplitName::Train); }), dangling);
  EXPECT_EQ(folder_error_of([&] { data::image_folder_classes(dir / "train"); }), dangling);
  for (const char* split : {"train", "test"}) fs::remove(dir / split / "bird");
  fs::create_symlink(dir / "train/ant/loop.jpg", dir / "train/ant/loop.jpg");
  EXPECT_EQ(folder_error_of([&] { data::split_size(options, data::SplitName::Train); }),
            (dir / "train/ant/loop.jpg").string() +
                ": a loop of symbolic links; remove it or restore the image");
  fs::remove(dir / "train/ant/loop.jpg");
  fs::create_symlink(dir / "gone.jpg", dir / "train/ant/.gone.jpg");
  EXPECT_EQ(data::split_size(options, data::SplitName::Train), 1);
}

// Counted without OpenCV: the listing train reads, its limit applied.
TEST(ImageFolder, ASplitIsCountedFromItsListing) {
  test_support::TempDir dir;
  for (const char* name : {"bird", "cat"}) {
    fs::create_directories(dir / "train" / name);
    for (int i = 0; i < 3; ++i) std::ofstream(dir / "train" / name / (std::to_string(i) + ".jpg"));
    fs::create_directories(dir / "test" / name);
  }
  std::ofstream(dir / "train" / "cat" / ".hidden");
  std::ofstream(dir / "test" / "cat" / "0.jpg");
  auto options = data::DataOptions().source(data::Source::Images).root(dir.path().string());
  EXPECT_EQ(data::split_size(options, data::SplitName::Train), 6);
  EXPECT_EQ(data::split_size(options, data::SplitName::Test), 1);
  EXPECT_EQ(data::split_size(options.train_limit(4), data::SplitName::Train), 4);
}

// A file as data.root was said as "<file>/train: folder not found; run get-data.sh --root <file>".
TEST(ImageFolder, ARootThatIsNotAFolderIsSaidAsSuch) {
  test_support::TempDir dir;
  std::ofstream(dir / "root.yaml") << "model: {}\n";
  for (const auto source : {data::Source::Auto, data::Source::Images, data::Source::Binary}) {
    const auto options = data::DataOptions().source(source).root((dir / "root.yaml").string());
    EXPECT_EQ(folder_error_of([&] { data::load_split(options, data::SplitName::Train); }),
              (dir / "root.yaml").string() +
                  ": is not a folder; data.root names the folder that holds CIFAR-10 "
                  "(cifar-10-batches-bin/ or train/ and test/)");
  }
}

TEST(ImageFolder, SupportFlagMatchesTheBuild) {
#ifdef TRAIN_HAVE_OPENCV
  EXPECT_TRUE(data::image_folders_supported());
#else
  EXPECT_FALSE(data::image_folders_supported());
#endif
}

}  // namespace
