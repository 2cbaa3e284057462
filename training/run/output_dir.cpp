#include "training/run/output_dir.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <vector>

#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"

namespace training {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMarker = ".train-output";
constexpr const char* kWriteProbe = ".train-write-probe-";

struct KindInfo {
  const char* word;  // in the marker
  const char* text;  // in messages
  int format;        // output_format's
};
constexpr std::array<KindInfo, 4> kKinds = {{
    {"run", "a run", 2},
    {"sweep", "a sweep", 3},
    {"memory-study", "a memory study", 3},
    {"comparison", "a comparison", 2},
}};  // in OutputKind's order

const KindInfo& info(OutputKind kind) {
  return kKinds[static_cast<size_t>(kind)];
}

// The marker's text: "run 2", "sweep 3 finished".
std::string marker_text(OutputKind kind, bool finished) {
  return std::string(info(kind).word) + " " + std::to_string(info(kind).format) +
         (finished ? " finished" : "") + "\n";
}

bool is_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// Files this program leaves in any folder it writes: the lock, the marker, temporaries.
// The lock, the marker, a temporary of an interrupted write, and refuse_unwritable_folder's probe
// left by a process killed while it probed.
bool is_bookkeeping(const std::string& name) {
  return name == ".lock" || name == kMarker || name.rfind(kWriteProbe, 0) == 0 ||
         (name.size() > 1 && name[0] == '.' && name.find(".tmp") != std::string::npos);
}

// Removes `path` and what it holds, links not followed (the pip LibTorch's
// std::filesystem::remove_all is not safe: tests/test_support.h); UserError naming what stays.
void remove_tree(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(path, ec))) {
    std::vector<fs::path> held;
    for (const auto& entry : fs::directory_iterator(path, ec)) held.push_back(entry.path());
    for (const auto& inner : held) remove_tree(inner);
  }
  if (!fs::remove(path, ec) && ec) {
    throw UserError(path.string() + ": cannot remove the stopped attempt's file (" + ec.message() +
                    ")");
  }
}

// Everything in `dir` but its lock and marker.
void remove_earlier_attempt(const fs::path& dir, const std::vector<std::string>& keep) {
  std::error_code ec;
  std::vector<fs::path> earlier;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool kept = std::find(keep.begin(), keep.end(), name) != keep.end();
    if (name != ".lock" && name != kMarker && !kept) earlier.push_back(entry.path());
  }
  for (const auto& path : earlier) remove_tree(path);
}

// "a run", "a sweep", "a memory study", "a comparison".
std::string kind_text(OutputKind kind) {
  return info(kind).text;
}

// A folder with a lock may be being written: its holder is named (DirectoryLock refuses) before
// its contents are read. Null where there is no lock file.
std::unique_ptr<DirectoryLock> lock_if_locked(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / ".lock", ec) ? std::make_unique<DirectoryLock>(dir) : nullptr;
}

// A path no file can be written at, known before anything runs: a name longer than the file
// system takes, or a loop of symbolic links on the way (said as such, not as a missing target).
void refuse_unusable_path(const fs::path& path, const std::string& flag) {
  for (const auto& part : path) {
    if (part.string().size() > 255) {
      throw UserError(flag + ": " + path.string() + ": a name in it is " +
                      std::to_string(part.string().size()) +
                      " bytes long, more than the 255 a file system takes");
    }
  }
  std::error_code ec;
  fs::path at;  // from the root down: the first part that loops is named
  for (const auto& part : fs::absolute(path, ec)) {
    at /= part;
    (void)fs::status(at, ec);
    if (ec.value() == ELOOP) {
      throw UserError(flag + ": " + path.string() + ": " + at.string() +
                      " is a loop of symbolic links");
    }
  }
}

// Refuses a path inside a folder that holds another command's outputs, at any depth: only that
// command writes there, and run again it removes what it does not know.
void refuse_inside_outputs(const fs::path& path, const std::string& flag) {
  std::error_code ec;
  const fs::path at = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return;  // refuse_unusable_path and the write say what is wrong with it
  for (fs::path folder = at.parent_path(); folder.has_relative_path();
       folder = folder.parent_path()) {
    if (!is_file(folder / kMarker)) continue;  // (not listing every folder up to the root)
    if (const HeldOutputs held = held_outputs(folder); held.kind) {
      throw UserError(flag + ": " + path.string() + " is inside " + folder.string() +
                      ", which holds " + kind_text(*held.kind) +
                      " (only its own command writes there); give a path outside it");
    }
  }
}

// claim_output_dir's judgement of what `dir` holds; `held` read under its lock.
void judge_output_dir(const fs::path& dir, const HeldOutputs& held, OutputKind kind,
                      const std::string& flag) {
  refuse_unusable_path(dir, flag);
  refuse_inside_outputs(dir, flag);
  std::error_code ec;
  if (held.kind) {
    const bool same = *held.kind == kind;
    const bool again = same && (kind == OutputKind::Run ? held.never_started : !held.finished);
    if (!again) {
      const bool resumable = same && kind == OutputKind::Run;
      throw UserError(
          dir.string() + ": already holds " + kind_text(*held.kind) + "; choose another " + flag +
          (resumable ? " or continue it with --resume " + shell_word(dir.string()) : ""));
    }
  } else if (!held.other_files.empty()) {
    std::string names;
    for (const auto& name : held.other_files) names += (names.empty() ? "" : ", ") + name;
    throw UserError(dir.string() + ": holds files that are not " + kind_text(kind) + " (" + names +
                    "); choose a new or empty " + flag);
  }
  if (fs::is_symlink(fs::symlink_status(dir, ec)) && !fs::exists(dir, ec)) {
    throw UserError(dir.string() + ": is a symbolic link to " + fs::read_symlink(dir, ec).string() +
                    ", which does not exist; create it or " + "choose another " + flag);
  }
  // The nearest part of it that exists must be a folder (or a link to one) for it to be created.
  fs::path existing = fs::absolute(dir, ec);
  while (existing.has_relative_path() &&
         fs::symlink_status(existing, ec).type() == fs::file_type::not_found) {
    existing = existing.parent_path();
  }
  if (fs::is_symlink(fs::symlink_status(existing, ec)) && !fs::exists(existing, ec)) {
    throw UserError(flag + ": " + dir.string() + ": cannot create the folder (" +
                    existing.string() + " is a symbolic link to " +
                    fs::read_symlink(existing, ec).string() + ", which does not exist)");
  }
  if (fs::exists(existing, ec) && !fs::is_directory(existing, ec)) {
    throw UserError(flag + ": " + dir.string() + ": cannot create the folder (" +
                    existing.string() + " is not a folder)");
  }
  refuse_unwritable_folder(existing, dir, flag);
}

}  // namespace

int output_format(OutputKind kind) {
  return info(kind).format;
}

HeldOutputs held_outputs(const fs::path& dir) {
  HeldOutputs held;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return held;
  held.marker = fs::symlink_status(dir / kMarker, ec).type() != fs::file_type::not_found;
  // A regular file only: a FIFO in its place would block the read.
  if (std::ifstream marker{is_file(dir / kMarker) ? dir / kMarker : fs::path()}) {
    std::string word, format, state;
    marker >> word >> format >> state;
    for (size_t i = 0; i < kKinds.size(); ++i) {
      if (word == kKinds[i].word) held.kind = static_cast<OutputKind>(i);
    }
    if (format == "finished") state = format;  // format 1 wrote none
    int number = 0;
    const char* end = format.data() + format.size();
    const auto [stop, error] = std::from_chars(format.data(), end, number);
    held.format = format.empty() || format == "finished"              ? 1
                  : stop == end && error == std::errc() && number > 0 ? number
                                                                      : 0;
    held.finished = state == "finished";
  }
  if (held.kind == OutputKind::Run) {
    held.never_started = !is_file(dir / "config.yaml") && !is_file(dir / "checkpoint.pt") &&
                         !is_file(dir / "metrics.jsonl");
  }
  if (!held.kind) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (!is_bookkeeping(name) && held.other_files.size() < 3) held.other_files.push_back(name);
    }
  }
  return held;
}

void check_output_dir(const fs::path& dir, OutputKind kind, const std::string& flag) {
  const auto lock = lock_if_locked(dir);
  judge_output_dir(dir, held_outputs(dir), kind, flag);
}

std::unique_ptr<DirectoryLock> claim_output_dir(const fs::path& dir, OutputKind kind,
                                                const std::string& flag,
                                                const std::vector<std::string>& keep) {
  std::error_code ec;
  std::unique_ptr<DirectoryLock> lock = lock_if_locked(dir);
  const HeldOutputs held = held_outputs(dir);
  judge_output_dir(dir, held, kind, flag);
  if (held.kind) {
    spdlog::info("{}: holds {} that stopped before it {}; starting it again", dir.string(),
                 kind_text(kind), kind == OutputKind::Run ? "started" : "finished");
  }
  fs::create_directories(dir, ec);
  if (ec) {
    throw UserError(flag + ": " + dir.string() + ": cannot create the folder (" + ec.message() +
                    ")");
  }
  if (!lock) lock = std::make_unique<DirectoryLock>(dir);
  // A sweep, study or comparison started again starts afresh: nothing of the attempt that
  // stopped (its trials, tables, temporaries) is read back or left beside this one's files.
  if (held.kind && kind != OutputKind::Run) remove_earlier_attempt(dir, keep);
  write_file_atomically(dir / kMarker, marker_text(kind, false));
  return lock;
}

void mark_finished(const fs::path& dir, OutputKind kind) {
  DeferRepeatedStops marking;  // a stop during the marker's write is after the outputs: dropped
  write_file_atomically(dir / kMarker, marker_text(kind, true));
  ignore_stops_from_now();
  test_stop_point("marked finished");  // tests: a stop after the outputs are complete
}

void check_file_outside_outputs(const fs::path& file, const std::string& flag) {
  refuse_unusable_path(file, flag);
  const fs::path folder = file.has_parent_path() ? file.parent_path() : fs::path(".");
  const HeldOutputs held = held_outputs(folder);
  if (held.kind) {
    throw UserError(flag + ": " + file.string() + " would be written into " + folder.string() +
                    ", which holds " + kind_text(*held.kind) +
                    " (only its own command writes there); give a path outside it");
  }
  refuse_inside_outputs(folder / file.filename(), flag);
  refuse_unwritable_folder(folder, file, flag);
}

void check_is_run(const fs::path& dir) {
  const HeldOutputs held = held_outputs(dir);
  if (held.kind && *held.kind != OutputKind::Run) {
    throw UserError(dir.string() + ": holds " + kind_text(*held.kind) +
                    ", not a run; train --resume continues training runs only");
  }
  if (held.kind || held.marker) check_output_format(dir, OutputKind::Run);
}

void check_output_format(const fs::path& dir, OutputKind kind, const std::string& advice) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UserError(dir.string() + ": not a folder");
  const HeldOutputs held = held_outputs(dir);
  if (!held.kind) {
    throw UserError(dir.string() + ": not " + kind_text(kind) + " written by train (" +
                    (held.marker ? "its .train-output marker is not one train writes"
                                 : "no .train-output marker in it") +
                    ")" + advice);
  }
  if (*held.kind != kind) {
    throw UserError(dir.string() + ": holds " + kind_text(*held.kind) + ", not " + kind_text(kind));
  }
  if (held.format != output_format(kind)) {
    throw UserError(dir.string() + ": written by another version of train (output format " +
                    (held.format > 0 ? std::to_string(held.format) : std::string("unreadable")) +
                    ", this build reads " + std::to_string(output_format(kind)) + ")");
  }
}

void check_adoptable_as_run(const fs::path& dir) {
  if (held_outputs(dir).marker) return;
  const auto a_runs = [](const fs::directory_entry& entry) {
    const std::string name = entry.path().filename().string();
    std::error_code ec;
    return entry.is_regular_file(ec) &&
           (entry.path().extension() == ".pt" || name.rfind("events.out.tfevents.", 0) == 0 ||
            std::find(std::begin(kRunFiles), std::end(kRunFiles), name) != std::end(kRunFiles));
  };
  std::string others;
  int count = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_bookkeeping(name) || a_runs(entry) || ++count > 3) continue;
    others += (others.empty() ? "" : ", ") + name;
  }
  if (!others.empty()) {
    throw UserError(dir.string() + ": holds what a run does not (" + others +
                    ") and no .train-output marker: a checkpoint is resumed in its run's own "
                    "folder; copy it into a folder of its own first");
  }
}

void adopt_as_run(const fs::path& dir) {
  check_adoptable_as_run(dir);
  if (!held_outputs(dir).marker) {
    write_file_atomically(dir / kMarker, marker_text(OutputKind::Run, false));
  }
}

void refuse_unwritable_folder(const fs::path& folder, const fs::path& path,
                              const std::string& flag) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return;  // created later, or said by the other checks
  const fs::path probe = folder / (kWriteProbe + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int error = errno;
    if (error == EEXIST) return;  // another of ours is probing: the folder takes files
    throw UserError(flag + ": " + path.string() + ": cannot write in " + folder.string() + " (" +
                    std::strerror(error) + ")");
  }
  ::close(fd);
  fs::remove(probe, ec);
}

}  // namespace training
