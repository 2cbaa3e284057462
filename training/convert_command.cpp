#include "training/convert_command.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <nlohmann/json.hpp>

#include "data/cifar10_binary.h"
#include "data/dataset.h"
#include "data/image_folder.h"
#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"

namespace training {

namespace fs = std::filesystem;

namespace {

// Train's own checks before anything is decoded: the root holds both splits' folders, with the
// same class folders (data::load_split's), at most the 10 labels a record's byte may hold.
std::vector<std::string> checked_classes(const fs::path& root) {
  const auto options = data::DataOptions().source(data::Source::Images).root(root.string());
  data::resolve_source(options);  // a file as the root
  for (const char* split : {"train", "test"}) {
    std::error_code ec;
    if (!fs::is_directory(root / split, ec)) {
      throw data::DataError((root / split).string() +
                            ": folder not found; train convert reads image folders "
                            "train/<class>/<image> and test/<class>/<image>");
    }
  }
  const auto classes = data::image_folder_classes(root / "train");
  if (classes.size() > static_cast<size_t>(data::kNumClasses)) {
    throw data::DataError((root / "train").string() + ": " + std::to_string(classes.size()) +
                          " class folders; the binary format holds labels 0..9");
  }
  return classes;
}

void print_listing(const fs::path& root, const std::vector<std::string>& classes) {
  for (const char* split : {"train", "test"}) {
    for (const auto& image : data::list_image_folder(root / split)) {
      std::cout << nlohmann::json{{"split", split},
                                  {"label", image.label},
                                  {"class", classes[image.label]},
                                  {"file", image.file.string()}}
                       .dump()
                << '\n';
    }
  }
  std::cout.flush();
  if (!std::cout) throw_write_error("standard output", errno);
}

// Where the output is written before it is renamed into place: hidden, beside it, this process's.
fs::path temporary_for(const fs::path& output) {
  return output.parent_path() / ("." + output.filename().string() + ".tmp" +
                                 std::to_string(::getpid()));
}

// Renames the finished folder into place, unless something appeared there meanwhile.
void rename_into_place(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  const int error = errno;
  if (error == EEXIST) {
    throw UserError(to.string() + ": appeared while converting; train convert replaces nothing, " +
                    "so the conversion was not kept");
  }
  throw_write_error(to, error);
}

// `count` records split into `files` consecutive runs whose sizes differ by at most one, the
// longer ones first (numpy.array_split's cut).
int64_t run_start(int64_t count, int files, int index) {
  const int64_t base = count / files, longer = count % files;
  return index * base + std::min<int64_t>(index, longer);
}

void write_split(const data::Split& split, const std::vector<fs::path>& files) {
  const int count = static_cast<int>(files.size());
  for (int i = 0; i < count; ++i) {
    write_file_atomically(files[i], data::binary_records(split, run_start(split.size(), count, i),
                                                         run_start(split.size(), count, i + 1)));
  }
}

// Removes the temporary folder: it holds only files this process wrote (the pip LibTorch's copy
// of std::filesystem::remove_all is not safe to call: tests/test_support.h).
void remove_work(const fs::path& work) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(work, ec)) fs::remove(entry.path(), ec);
  fs::remove(work, ec);
}

std::string class_names(const std::vector<std::string>& classes) {
  std::string text;
  for (const auto& name : classes) text += name + "\n";
  return text;
}

}  // namespace

int convert_command(const ConvertRequest& request) {
  const fs::path root = request.root;
  const auto classes = checked_classes(root);
  if (request.list) {
    print_listing(root, classes);
    return kExitOk;
  }
  const fs::path output = fs::path(request.output).lexically_normal();
  if (output.filename().empty() || output.filename() == "." || output.filename() == "..") {
    throw UserError(request.output + ": expected the path of a folder to create");
  }
  std::error_code ec;
  if (fs::symlink_status(output, ec).type() != fs::file_type::not_found) {
    throw UserError(output.string() + ": already there; train convert writes a new folder and " +
                    "replaces nothing (give a path that does not exist)");
  }
  if (!output.parent_path().empty() && !fs::is_directory(output.parent_path(), ec)) {
    throw UserError(output.parent_path().string() + ": no such folder to create " +
                    output.filename().string() + " in");
  }
  if (!data::image_folders_supported()) {
    throw data::DataError(root.string() +
                          ": this build has no OpenCV, so train convert cannot decode images; run "
                          "it where train has OpenCV, or here `scripts/get-data.sh --from " +
                          root.string() + " --to-binary --decode-with-pillow` (train's listing, " +
                          "Pillow's pixels)");
  }
  install_stop_handlers();
  const auto work = temporary_for(output);
  fs::create_directory(work);
  try {
    const auto options = data::DataOptions().source(data::Source::Images).root(root.string());
    for (const bool train : {true, false}) {
      const auto split = data::load_split(options, train ? data::SplitName::Train
                                                         : data::SplitName::Test);
      if (stop_requested()) break;
      write_split(split, data::binary_batch_files(work, train));
      spdlog::info("convert: {}: {} images -> {}", (root / (train ? "train" : "test")).string(),
                   split.size(), train ? "data_batch_1..5.bin" : "test_batch.bin");
    }
    if (!stop_requested()) {
      write_file_atomically(work / "batches.meta.txt", class_names(classes));
      rename_into_place(work, output);
    }
  } catch (...) {
    remove_work(work);
    throw;
  }
  if (stop_requested()) {
    remove_work(work);
    spdlog::warn("convert: stopped; nothing was written to {}", output.string());
    return kExitStopped;
  }
  spdlog::info("convert: {} ready ({} classes: data.root: {})", output.string(), classes.size(),
               output.string());
  return kExitOk;
}

}  // namespace training
