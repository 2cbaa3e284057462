// Which command's folder a directory is. Every output directory (a run, a sweep, a memory study,
// a comparison) carries a marker, `.train-output`, naming its kind, and "finished" once a sweep,
// study or comparison completed; only its own command writes into it:
//   - a new output goes into an absent or empty folder, or into an unfinished one of its own kind
//     (a sweep, study or comparison stopped part-way is started again; a run is continued with
//     --resume instead);
//   - `train --resume` continues runs only.
// The marker also carries the format of the files the folder holds (output_format): a folder of
// another format is refused in one line where it is read back.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "training/platform/dir_lock.h"

namespace training {

enum class OutputKind { Run, Sweep, MemoryStudy, Comparison };

// The format of what an output folder of `kind` holds (config.yaml, decisions.json,
// metrics.jsonl, sweep.json, ...); raised for a kind when one of its files changes in a way this
// build cannot read back. 1: the markers that carried no format; 2: the first with one; 3 (sweeps
// and memory studies): sweep.slurm_options became sweep.slurm.options in their config.yaml (a
// run's config.yaml holds no sweep section: runs and comparisons stay at 2).
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

// Creates `dir` for a new output of `kind` and returns its lock (dir_lock.h), or refuses
// (UserError, one line naming `flag` and what the folder holds). The lock is taken before the
// folder's contents are judged: a folder another process is writing is refused naming that
// process, not what it holds so far. The marker is written before anything else.
// An unfinished folder of the same kind is started again, emptied first but for the names in
// `keep` (a Slurm sweep's trials/, whose results are not measured again).
[[nodiscard]] std::unique_ptr<DirectoryLock> claim_output_dir(
    const std::filesystem::path& dir, OutputKind kind, const std::string& flag,
    const std::vector<std::string>& keep = {});

// What claim_output_dir would refuse, refused now without creating or writing anything: for a
// command that measures before it writes (train's autos), so that a folder it cannot use is
// exit 2 before any measurement.
void check_output_dir(const std::filesystem::path& dir, OutputKind kind, const std::string& flag);

// The marker says the command finished (a finished sweep, study or comparison is not redone).
void mark_finished(const std::filesystem::path& dir, OutputKind kind);

// Refuses (UserError, naming `flag`) a file output (a bench's --output) that would land in an
// output folder of ours: only that folder's own command writes there.
void check_file_outside_outputs(const std::filesystem::path& file, const std::string& flag);
// Refuses (UserError, naming both flags) a file output inside the folder the same command claims
// (`own_dir`, given with `own_flag`; "" for none), existing, empty or not yet created: only the
// command's own files go there, and starting it again empties it. Checked before the file's
// other refusals, as the command line's own contradiction.
void check_file_outside_own_output(const std::filesystem::path& file, const std::string& flag,
                                   const std::filesystem::path& own_dir,
                                   const std::string& own_flag = "--output-dir");

// Refuses (UserError, naming both flags) an output file that is one of the command's own inputs
// (`bench loader --config X.yaml --output X.yaml` replaced the config): no command writes onto
// what it reads.
void check_not_an_input(const std::filesystem::path& output, const std::string& flag,
                        const std::filesystem::path& input, const std::string& input_flag);

// Refuses (UserError) a `--resume` of a folder that holds another kind of output or another format
// (a folder without a marker: refused by resume_target, unless a checkpoint file is named).
void check_is_run(const std::filesystem::path& dir);

// Refuses (UserError, one line) a folder read back as `kind` whose marker is missing, names another
// kind, or gives another format than output_format(kind); `advice` ends the line of a folder that
// holds no output of train's.
void check_output_format(const std::filesystem::path& dir, OutputKind kind,
                         const std::string& advice = "");

// A run resumed from a checkpoint file in a folder without a marker: the folder becomes the run's.
void adopt_as_run(const std::filesystem::path& dir);

}  // namespace training
