// The run directory and everything in it. One writer owns it: components hand over records,
// this class writes files (atomically) and owns train.log.
//
//   <run>/config.yaml      effective config (every key)
//   <run>/train.log        the log (same lines as the console)
//   <run>/metrics.jsonl    one JSON object per epoch
//   <run>/metrics.csv      the same rows as CSV
//   <run>/checkpoint.pt    latest checkpoint (see checkpoint_io.h)
//   <run>/.lock            held by the process writing the run (see dir_lock.h)
//   <run>/.train-output    "run": what the folder is (see output_dir.h)
#pragma once

#include <spdlog/sinks/sink.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "training/config/decisions.h"
#include "training/platform/dir_lock.h"
#include "training/platform/stop_signal.h"
#include "training/run/checkpoint_io.h"
#include "training/run/epoch_record.h"

namespace training {

// Removes the temporaries that an interrupted atomic write (kill -9, a second Ctrl-C) left in
// `dir`; returns how many. Only safe while holding the directory's lock.
int remove_stale_temporaries(const std::filesystem::path& dir);

// A run directory's decisions: its decisions.json (UserError naming it when it cannot be read, or
// when its blocks are not the run's model's, `asked`, as train writes them); without it, its
// checkpoint's (none otherwise).
Decisions read_decisions(const std::filesystem::path& run_dir, const Config& asked);

// What a run trained with, for `train report` and `train compare`: its config.yaml and decisions
// (read_decisions). Where its checkpoint.pt records other inputs (the files edited since the run
// wrote them: --resume refuses or rewrites them too), the checkpoint's, and `note` says so.
struct RecordedInputs {
  Config asked;
  Decisions decisions;
  std::string note;  // empty where the files are the checkpoint's record (or there is none)
};
RecordedInputs recorded_inputs(const std::filesystem::path& run_dir);

class RunDirectory {
 public:
  // Opens `dir` for a new run (claim_output_dir) or, `resuming`, an existing one whose metrics are
  // read back; holds its lock, removes temporaries an interrupted write left, logs to train.log.
  // `named_by`: what named a new run's folder, for claim_output_dir's refusals.
  RunDirectory(std::filesystem::path dir, bool resuming,
               const std::string& named_by = "--output-dir");
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::filesystem::path& path() const { return dir_; }
  std::filesystem::path checkpoint_path() const { return dir_ / "checkpoint.pt"; }

  // config.yaml (what was asked) and decisions.json (what the run decided: config/decisions.h).
  void write_inputs(const RunInputs& inputs) const;

  // Adds (or replaces, by epoch) one epoch's record and rewrites metrics.jsonl and metrics.csv.
  void record_epoch(const EpochRecord& record);
  // Drops records after `epoch` (on resume: rows written after the checkpoint being resumed),
  // except the row of a part-way epoch recorded at `step` itself (training.max_steps ended it
  // there, and the checkpoint holds it): it stays until that epoch is trained on and replaces it.
  void keep_epochs_through(int64_t epoch, int64_t step = -1);
  const std::vector<EpochRecord>& epochs() const { return epochs_; }

 private:
  void write_metrics() const;

  std::filesystem::path dir_;
  std::unique_ptr<DirectoryLock> lock_;
  std::vector<EpochRecord> epochs_;
  std::shared_ptr<spdlog::sinks::sink> log_sink_;
  std::optional<StopLineFile> stop_line_;  // train.log, for a stop before the graceful handlers
  int uncaught_ = 0;  // errors under way when it opened: one more when it closes is the run's
};

// The line a command ends with on an error (app/process.h's exit codes), logged at `level`; where
// a run folder closed as that error left it, in its train.log too (it ended at the line before).
void log_final_error(spdlog::level::level_enum level, const std::string& line);

// While one lives, what is logged and a stop's line go to the train.log of a run folder that closed
// as an error left it too (train's steps measured after out of memory, before the error's line).
class ClosedRunLog {
 public:
  ClosedRunLog();
  ~ClosedRunLog();
  ClosedRunLog(const ClosedRunLog&) = delete;
  ClosedRunLog& operator=(const ClosedRunLog&) = delete;

 private:
  std::shared_ptr<spdlog::sinks::sink> sink_;
  std::optional<StopLineFile> stop_line_;
};

// A resumed run's train.log before its RunDirectory opens it: while one lives, a stop's line
// (StopLineFile) and log_final_error's go there too, if it is a regular file (never created).
class ResumedRunLog {
 public:
  explicit ResumedRunLog(std::filesystem::path train_log);
  ~ResumedRunLog();
  ResumedRunLog(const ResumedRunLog&) = delete;
  ResumedRunLog& operator=(const ResumedRunLog&) = delete;

 private:
  std::filesystem::path file_;
  StopLineFile stop_line_;
  int uncaught_ = 0;
};

// The epoch records of a metrics.jsonl (none when it is missing); UserError naming the file and
// row for a row that is not a record.
std::vector<EpochRecord> read_metrics(const std::filesystem::path& file);

// The epoch records of the run in `run_dir`, at least one, and where its checkpoint stands; else a
// UserError, the same for `train report` and `train compare`: "RUN: a run with no epoch recorded
// yet (...), so nothing to <what>", with the command that continues it where it has a checkpoint
// and is not `in_training` (a process trains it now: the caller asks the lock before it takes one
// of its own). Not in training, rows fewer than the checkpoint's epochs are refused.
struct RunRecord {
  std::vector<EpochRecord> epochs;       // at least one, those its checkpoint holds
  std::optional<TrainState> checkpoint;  // where checkpoint.pt stands, where it is readable
};
RunRecord recorded_run(const std::filesystem::path& run_dir, const std::string& what,
                       bool in_training);

// What resuming the run in `dir` with `config` would meet, checked without writing anything: a
// folder that is not there or takes no file, another process's lock (naming it), a file the resume
// writes (as `config` has it: trace.json only with the profiler on) that is not a file or cannot be
// written, a metrics.jsonl it cannot read back or without the `epochs_done` the checkpoint has (a
// resume would rewrite metrics.csv without them).
void check_run_to_resume(const std::filesystem::path& dir, int64_t epochs_done,
                         const Config& config);

// The app's logger: info and above to stderr. The logger itself passes trace level so that
// train.log, whose sink takes everything, also receives the live progress lines.
void configure_console_logging();

// <parent>/<name>, or <parent>/<YYYYmmdd-HHMMSS>-<arch>[-N] when name is empty (N makes it new).
std::filesystem::path new_run_path(const std::filesystem::path& parent, const std::string& name,
                                   const std::string& arch);

// The folder a command's new output goes to, and what named it, for its refusals to name: the
// --output-dir given, else output.dir / output.name where the command takes a name (a run, a
// sweep) and one is set, else output.dir / <YYYYmmdd-HHMMSS>-<what>.
struct OutputFolder {
  std::filesystem::path path;  // a dated name: the one free when it was named
  // "--output-dir"; "output.name" where that folder exists (the name is what collides), else
  // "output.dir/output.name"; "output.dir" for a dated name.
  std::string named_by;
  std::string dated_what;  // a dated name's <what>; empty otherwise
  // The folder to claim: a dated name is named again then (another run may have taken this one).
  std::filesystem::path to_claim() const;
};
OutputFolder output_folder(const std::string& output_dir_flag, const Config& config,
                           const std::string& what, bool takes_name);

}  // namespace training
