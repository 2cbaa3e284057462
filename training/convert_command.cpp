#include "training/convert_command.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "build_config.h"
#include "data/cifar10_binary.h"
#include "data/dataset.h"
#include "data/image_folder.h"
#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"

namespace training {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTemporaryPrefix = ".train-convert.";  // + pid + "." + 6 random characters

data::DataOptions images_at(const fs::path& root) {
  return data::DataOptions().source(data::Source::Images).root(root.string());
}

// Train's own checks before anything is decoded (data::load_split's: the root holds both splits'
// folders with the same class folders), and the format's: at most the 10 labels a record's byte
// holds, names that batches.meta.txt can hold one per line.
std::vector<std::string> checked_classes(const fs::path& root) {
  data::resolve_source(images_at(root));  // a file as the root
  for (const char* split : {"train", "test"}) {
    std::error_code ec;
    if (!fs::is_directory(root / split, ec)) {
      throw data::DataError((root / split).string() +
                            ": folder not found; train convert reads image folders "
                            "train/<class>/<image> and test/<class>/<image>");
    }
  }
  data::check_same_class_folders(root);
  const auto classes = data::image_folder_classes(root / "train");
  if (classes.size() > static_cast<size_t>(data::kNumClasses)) {
    throw data::DataError((root / "train").string() + ": " + std::to_string(classes.size()) +
                          " class folders; the binary format holds labels 0..9");
  }
  for (const auto& name : classes) {
    if (name.find_first_of("\n\r") != std::string::npos) {
      throw data::DataError((root / "train" / name).string() +
                            ": a class folder whose name holds a line break; batches.meta.txt "
                            "holds one class name per line: rename it");
    }
  }
  return classes;
}

// One JSON line; a name that is not UTF-8 cannot be written in JSON and is named instead.
std::string json_line(const nlohmann::ordered_json& line, const fs::path& file) {
  try {
    return line.dump();
  } catch (const nlohmann::json::exception&) {
    throw data::DataError(file.string() +
                          ": a name that is not UTF-8, which the listing (JSON) cannot carry; "
                          "rename it, or convert with train convert where train has OpenCV");
  }
}

void print_listing(const fs::path& root, const std::vector<std::string>& classes) {
  std::string text = json_line({{"classes", classes}}, root / "train") + "\n";
  for (const char* split : {"train", "test"}) {
    for (const auto& image : data::list_image_folder(root / split)) {
      text += json_line({{"split", split},
                         {"label", image.label},
                         {"class", classes[image.label]},
                         {"file", image.file.string()}},
                        image.file) +
              "\n";
    }
  }
  std::cout << text << std::flush;
  if (!std::cout) throw_write_error("standard output", errno);
}

bool is_ours(const fs::path& file) {  // what a conversion writes into its temporary folder
  const auto name = file.filename().string();
  return name == "batches.meta.txt" || name == "test_batch.bin" ||
         name.rfind("data_batch_", 0) == 0 || is_temporary_of(file, "test_batch.bin") ||
         name.rfind(".data_batch_", 0) == 0 || is_temporary_of(file, "batches.meta.txt");
}

// Removes a conversion's temporary folder: only the files it writes, then the folder if empty (the
// pip LibTorch's std::filesystem::remove_all is not safe to call: tests/test_support.h).
void remove_work(const fs::path& work) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(work, ec)) {
    if (is_ours(entry.path())) fs::remove(entry.path(), ec);
  }
  fs::remove(work, ec);
}

// The temporary folders in `parent` of conversions that were killed (their process is gone).
void remove_stale_work(const fs::path& parent) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind(kTemporaryPrefix, 0) != 0 || !entry.is_directory(ec)) continue;
    const long pid = std::strtol(name.c_str() + std::strlen(kTemporaryPrefix), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      remove_work(entry.path());
    }
  }
}

// The folder to create, as given (resolved as mkdir would), without trailing slashes; never inside
// `root`'s splits (a folder there is a class to every later reader).
fs::path output_path(const std::string& given, const fs::path& root) {
  std::string text = given;
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  const fs::path output = text;
  const auto name = output.filename();
  if (name.empty() || name == "." || name == ".." || text == "/") {
    throw UserError(given + ": expected the path of a folder to create");
  }
  std::error_code ec;
  const auto status = fs::symlink_status(output, ec);
  if (ec && status.type() != fs::file_type::not_found) {
    throw UserError(output.string() + ": cannot be created (" + ec.message() + ")");
  }
  if (status.type() != fs::file_type::not_found) {
    throw UserError(output.string() + ": already there; train convert writes a new folder and " +
                    "replaces nothing (give a path that does not exist)");
  }
  const fs::path parent = output.has_parent_path() ? output.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) {
    throw UserError(output.string() + ": cannot create the folder (" + parent.string() +
                    (fs::exists(parent, ec) ? " is not a folder)" : " does not exist)"));
  }
  const fs::path at = fs::weakly_canonical(fs::absolute(parent, ec), ec);
  for (const char* split : {"train", "test"}) {
    const fs::path inside = fs::weakly_canonical(fs::absolute(root / split, ec), ec);
    for (fs::path folder = at; !ec && folder.has_relative_path(); folder = folder.parent_path()) {
      if (folder != inside) continue;
      throw UserError(output.string() + ": inside " + (root / split).string() +
                      ", where a folder is a class to every reader of the images; give a path "
                      "outside the data root's splits");
    }
  }
  remove_stale_work(parent);
  return output;
}

// A new folder of this process beside `output`, never one that exists already.
fs::path make_work(const fs::path& output) {
  const fs::path parent = output.has_parent_path() ? output.parent_path() : fs::path(".");
  std::string name =
      (parent / (std::string(kTemporaryPrefix) + std::to_string(::getpid()) + ".XXXXXX")).string();
  if (::mkdtemp(name.data()) == nullptr) throw_write_error(output, errno);
  // mkdtemp makes it 0700; the output is a folder as mkdir makes it: 0777 less the umask.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::chmod(name.c_str(), 0777 & ~mask) != 0) throw_write_error(output, errno);
  return name;
}

// A full disk while writing into the work folder, said of the output (the work folder is removed):
// "OUTPUT: could not be written (No space left on device); ...".
[[noreturn]] void throw_for_output(const fs::path& output, const CannotWrite& error) {
  const std::string text = error.what();
  const auto close = text.rfind(')');
  const auto open = close == std::string::npos ? close : text.rfind('(', close);
  const std::string reason =
      open == std::string::npos ? text : text.substr(open + 1, close - open - 1);
  const std::string message = output.string() + ": could not be written (" + reason +
                              "); nothing was created and the partial conversion was removed";
  throw CannotWrite(message);
}

// Renames the finished folder into place, unless something appeared there meanwhile.
void rename_into_place(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  const int error = errno;
  if (error == EEXIST || error == ENOTEMPTY) {
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
  const fs::path output = output_path(request.output, root);
  if (!data::image_folders_supported()) {
    throw data::DataError(root.string() +
                          ": this build has no OpenCV, so train convert cannot decode images; run "
                          "it where train has OpenCV, or here `" +
                          shell_word(TRAIN_SCRIPTS_DIR "/get-data.sh") + " --from " +
                          shell_word(root.string()) +
                          " --to-binary --decode-with-pillow` (train's listing, Pillow's pixels)");
  }
  install_stop_handlers();
  // Both splits are read (and refused as train refuses them) before anything is written.
  const auto train = data::load_split(images_at(root), data::SplitName::Train);
  const auto test = data::load_split(images_at(root), data::SplitName::Test);
  if (stop_requested()) {
    spdlog::warn("convert: stopped; nothing was written to {}", output.string());
    return kExitStopped;
  }
  const auto work = make_work(output);
  try {
    write_split(train, data::binary_batch_files(work, true));
    write_split(test, data::binary_batch_files(work, false));
    write_file_atomically(work / "batches.meta.txt", class_names(classes));
    if (!stop_requested()) rename_into_place(work, output);
  } catch (const CannotWrite& e) {
    remove_work(work);
    throw_for_output(output, e);
  } catch (...) {
    remove_work(work);
    throw;
  }
  if (!fs::exists(output)) {  // stopped before the rename: nothing is left
    remove_work(work);
    spdlog::warn("convert: stopped; nothing was written to {}", output.string());
    return kExitStopped;
  }
  spdlog::info(
      "convert: {} ready: {} training images (data_batch_1..5.bin), {} test images "
      "(test_batch.bin), {} classes; use it as data.root",
      output.string(), train.size(), test.size(), classes.size());
  return kExitOk;
}

}  // namespace training
