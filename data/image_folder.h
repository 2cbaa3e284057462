// Reader for image folders laid out <dir>/<class>/<image> (e.g. the JPEG CIFAR-10 tarball).
// Class index = position of the folder name in sorted order, which for CIFAR-10 is its label
// order. Images are taken round-robin over the classes (1st of each class, then 2nd, ...), so a
// `limit` subset stays class-balanced. Decoding uses OpenCV; a build without OpenCV refuses.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "data/split.h"

namespace data {

// True when this build can decode images (it was built with OpenCV).
bool image_folders_supported();

// Sorted class folder names under `dir`.
std::vector<std::string> image_folder_classes(const std::filesystem::path& dir);

// A class's index is its folder's position among the split's class folders, so both splits of
// `root` (train/ and test/, where both are folders) must have the same class folders: one missing
// in a split would shift every later label by one. Throws DataError naming what differs.
void check_same_class_folders(const std::filesystem::path& root);

// One image of a split and its label (its class folder's position), in the order train reads.
struct LabelledFile {
  std::filesystem::path file;
  int64_t label;
};

// The images train reads from `dir`: every regular file not starting with '.' in each class
// folder, sorted by name per class, taken round-robin over the classes. Needs no OpenCV. Throws
// DataError for a symbolic link to nothing, a folder with no class sub-folders, or no images.
std::vector<LabelledFile> list_image_folder(const std::filesystem::path& dir);

// Decodes up to `limit` images (0 = all) of list_image_folder(dir). Throws DataError naming the
// file for an undecodable image, an image that is not 32x32, or a folder with no class sub-folders.
Split read_image_folder(const std::filesystem::path& dir, int64_t limit = 0);

}  // namespace data
