#include "data/image_folder.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>

#include "build_config.h"

#ifdef TRAIN_HAVE_OPENCV
#include <opencv2/core/utils/logger.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#endif

namespace data {

namespace fs = std::filesystem;

bool image_folders_supported() {
#ifdef TRAIN_HAVE_OPENCV
  return true;
#else
  return false;
#endif
}

namespace {

// A symbolic link whose target cannot be reached (missing, or a loop of links) is refused, naming
// it: skipped, a class folder's absence would shift every later label, an image's shrink the split.
void refuse_broken_link(const fs::directory_entry& entry, const char* what) {
  std::error_code ec;
  if (!entry.is_symlink(ec)) return;
  const auto status = fs::status(entry.path(), ec);
  if (ec.value() == ELOOP) {
    throw DataError(entry.path().string() +
                    ": a loop of symbolic links; remove it or restore the " + what);
  }
  if (status.type() == fs::file_type::not_found) {
    throw DataError(entry.path().string() + ": a symbolic link to nothing (its target " +
                    fs::read_symlink(entry.path(), ec).string() + " does not exist); remove it " +
                    "or restore the " + what);
  }
}

}  // namespace

std::vector<std::string> image_folder_classes(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DataError(dir.string() + ": folder not found");
  std::vector<std::string> classes;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (name.front() == '.') continue;
    refuse_broken_link(entry, "class folder");
    if (entry.is_directory()) classes.push_back(name);
  }
  if (classes.empty()) {
    throw DataError(dir.string() + ": no class folders, expected <class>/<image> inside");
  }
  std::sort(classes.begin(), classes.end());
  return classes;
}

void check_same_class_folders(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root / "train", ec) || !fs::is_directory(root / "test", ec)) return;
  const auto train = image_folder_classes(root / "train");
  const auto test = image_folder_classes(root / "test");
  if (train == test) return;
  std::vector<std::string> missing, extra;
  std::set_difference(train.begin(), train.end(), test.begin(), test.end(),
                      std::back_inserter(missing));
  std::set_difference(test.begin(), test.end(), train.begin(), train.end(),
                      std::back_inserter(extra));
  auto list = [](const std::vector<std::string>& names) {
    std::string text;
    for (const auto& name : names) text += (text.empty() ? "'" : ", '") + name + "'";
    return text;
  };
  throw DataError((root / "test").string() + ": its class folders differ from " +
                  (root / "train").string() + "'s (" +
                  (missing.empty() ? "" : "missing " + list(missing)) +
                  (missing.empty() || extra.empty() ? "" : "; ") +
                  (extra.empty() ? "" : "extra " + list(extra)) +
                  "); a class's label is its folder's position, so every later label would shift");
}

// Round-robin over the classes so that any prefix of the list is class-balanced.
std::vector<LabelledFile> list_image_folder(const fs::path& dir) {
  std::vector<std::vector<fs::path>> per_class;
  for (const auto& name : image_folder_classes(dir)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir / name)) {
      if (entry.path().filename().string().front() == '.') continue;
      refuse_broken_link(entry, "image");
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    per_class.push_back(std::move(files));
  }
  std::vector<LabelledFile> images;
  for (size_t i = 0;; ++i) {
    bool any = false;
    for (size_t c = 0; c < per_class.size(); ++c) {
      if (i < per_class[c].size()) {
        images.push_back({per_class[c][i], static_cast<int64_t>(c)});
        any = true;
      }
    }
    if (!any) break;
  }
  if (images.empty()) throw DataError(dir.string() + ": class folders hold no images");
  return images;
}

#ifdef TRAIN_HAVE_OPENCV
namespace {

// Decodes one image into `chw` (3*32*32 bytes, RGB planes).
void decode_into(const fs::path& file, uint8_t* chw) {
  std::ifstream in(file, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw DataError(file.string() + ": cannot read file");
  cv::Mat bgr = bytes.empty() ? cv::Mat() : cv::imdecode(bytes, cv::IMREAD_COLOR);
  if (bgr.empty()) throw DataError(file.string() + ": not a decodable image");
  if (bgr.rows != kImageSide || bgr.cols != kImageSide) {
    throw DataError(file.string() + ": image is " + std::to_string(bgr.cols) + "x" +
                    std::to_string(bgr.rows) + ", expected 32x32");
  }
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  constexpr int64_t kPlane = kImageSide * kImageSide;
  for (int64_t p = 0; p < kPlane; ++p) {
    for (int64_t c = 0; c < kChannels; ++c) chw[c * kPlane + p] = rgb.data[p * kChannels + c];
  }
}

}  // namespace
#endif

Split read_image_folder(const fs::path& dir, int64_t limit) {
#ifndef TRAIN_HAVE_OPENCV
  (void)limit;
  throw DataError(dir.string() +
                  ": this build has no OpenCV, so image folders cannot be decoded; convert them "
                  "where train has OpenCV (`train convert " +
                  dir.parent_path().string() +
                  " OUT`, then data.root: OUT) or rebuild with OpenCV");
#else
  const auto images = list_image_folder(dir);
  // OpenCV's own warnings (a 32-bit TIFF's) would come before the one-line error.
  cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_SILENT);
  const int64_t count = limit > 0 ? std::min<int64_t>(limit, images.size()) : images.size();
  Split split{torch::empty({count, kChannels, kImageSide, kImageSide}, torch::kUInt8),
              torch::empty({count}, torch::kInt64)};
  auto* pixels = split.images.data_ptr<uint8_t>();
  auto* labels = split.labels.data_ptr<int64_t>();
  constexpr int64_t kImageBytes = kChannels * kImageSide * kImageSide;
  at::parallel_for(0, count, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      decode_into(images[i].file, pixels + i * kImageBytes);
      labels[i] = images[i].label;
    }
  });
  return split;
#endif
}

}  // namespace data
