// Which command's folder a directory is: every output directory carries a marker, `.train-output`,
// naming its kind and format (output_format), and "finished" once its command completed. Only its
// own command writes into it: a new output goes into an absent or empty folder or an unfinished one
// of its kind (started again; a run is continued with --resume, which continues runs only). A
// folder of another format is refused in one line where it is read back.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "training/platform/dir_lock.h"

namespace training {

enum class OutputKind { Run, Sweep, MemoryStudy, Comparison };

// The format of an output folder of `kind`'s files, raised when one changes in a way this build
// cannot read back. 1: markers without one; 2: the first with one; 3 (sweeps and memory studies):
// sweep.slurm_options became sweep.slurm.options (runs and comparisons have no sweep section).
int output_format(OutputKind kind);

struct HeldOutputs {
  std::optional<OutputKind> kind;  // none: absent, empty, or not one of ours (no marker)
  bool marker = false;             // a .train-output stands there, readable or not
  int format = 0;  // with a kind: the marker's format; 0 where it is not a number train writes
  bool finished = false;                 // its command completed
  std::vector<std::string> other_files;  // up to three names of files that are none of ours
  // A run folder whose start-up failed before config.yaml (a full disk, a signal): nothing to
  // resume, nothing lost by starting again.
  bool never_started = false;
};

HeldOutputs held_outputs(const std::filesystem::path& dir);

// Creates `dir` for a new output of `kind`, marker first, and returns its lock, or refuses in one
// line naming `flag`; the lock comes first, so a folder being written is refused naming its
// writer. An unfinished folder of the kind is emptied but for `keep` (a Slurm sweep's trials/).
[[nodiscard]] std::unique_ptr<DirectoryLock> claim_output_dir(
    const std::filesystem::path& dir, OutputKind kind, const std::string& flag,
    const std::vector<std::string>& keep = {});

// Refuses `path` where its existing `folder` takes no new file (read-only, no permission, /proc),
// tried with a file created and removed, before anything is measured; UserError naming `flag`.
void refuse_unwritable_folder(const std::filesystem::path& folder,
                              const std::filesystem::path& path, const std::string& flag);

// What claim_output_dir would refuse, without writing anything: before train's autos measure.
void check_output_dir(const std::filesystem::path& dir, OutputKind kind, const std::string& flag);

// The marker says the command finished (a finished sweep, study or comparison is not redone).
void mark_finished(const std::filesystem::path& dir, OutputKind kind);

// Refuses (UserError, naming `flag`) a file output that would land in an output folder of ours
// (only that folder's own command writes there) or in a folder that takes no new file; the rest
// of a file output's checks are check_output_file's (output_file.h).
void check_file_outside_outputs(const std::filesystem::path& file, const std::string& flag);
// Refuses (UserError) a `--resume` of a folder that holds another kind of output or another format
// (a folder without a marker: refused by resume_target, unless a checkpoint file is named).
void check_is_run(const std::filesystem::path& dir);

// Refuses (UserError, one line) a folder read back as `kind` whose marker is missing, names another
// kind, or gives another format than output_format(kind); `advice` ends the line of a folder that
// holds no output of train's.
void check_output_format(const std::filesystem::path& dir, OutputKind kind,
                         const std::string& advice = "");

// The files a run writes (run_dir.h, the observers, the plots) besides TensorBoard's
// events.out.tfevents.*: a resume writes or adds to each, and a folder holding only these (and the
// checkpoints, *.pt) is a run's.
inline constexpr const char* kRunFiles[] = {
    "config.yaml", "decisions.json",         "metrics.jsonl",  "metrics.csv",      "report.md",
    "train.log",   "checkpoint.pt",          "gpu.jsonl",      "trace.json",       "plot.log",
    "memory.png",  "memory_snapshot.pickle", "throughput.png", "loss_accuracy.png"};

// A run resumed from a checkpoint file in a folder without a marker: the folder becomes the run's,
// where it holds nothing but what a run writes (check_adoptable_as_run refuses other files and any
// folder, naming up to three, before anything is written).
void check_adoptable_as_run(const std::filesystem::path& dir);
void adopt_as_run(const std::filesystem::path& dir);

}  // namespace training
