// sweep.launcher: slurm -- a sweep's trials as the tasks of one Slurm job array, submitted with
// sbatch --array (array index = trial id), followed with scontrol, cancelled with scancel. Each
// task runs the trial the local launcher would run (`train sweep-trial`) on the trial's files in
// the sweep folder, which must be on a filesystem the nodes share, as must `train` itself.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "training/studies/trial.h"

namespace training {

// One array task as Slurm reports it.
struct SlurmTask {
  std::string state;  // PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, NODE_FAIL, ...; "" unknown
  std::string exit_code;  // "status:signal", e.g. "0:9"
  std::string node;
  std::string reason;  // why it is pending or failed ("None" when Slurm gives none)
  // An ended task's run time as Slurm records it (EndTime - StartTime, whole seconds); -1 when
  // it did not run or Slurm no longer knows it.
  double elapsed_seconds = -1;
  bool ended() const;  // a final state, or no longer known to Slurm
  // "FAILED (exit code 0:9, killed by signal 9) on node b"; the reason a task was pending for is
  // left out once it started (it is stale: "CANCELLED on node na", not "..., reason Resources").
  std::string describe() const;
};

struct SlurmOutcome {
  std::string job_id;
  std::map<int64_t, SlurmTask> tasks;  // by array index (the trial id)
  bool stopped = false;                // a stop signal came and the array was cancelled
};

// Refuses (UserError, one line) before the sweep folder exists: no sbatch, scontrol or scancel
// on PATH, a controller that does not answer (scontrol show config), a grid of `trials` trials
// larger than one job array may be here (MaxArraySize - 1: the indices are 1..trials), or sbatch
// refusing `options` (a job tried with sbatch --test-only: nothing runs). The options sbatch
// would read as its own (--array, --wrap, --test-only, --wait, --parsable) are refused earlier,
// with the config (validate.cpp).
void check_slurm(const std::vector<std::string>& options, int64_t trials);

// The grid's size a job array takes: MaxArraySize - 1 read from `scontrol show config`'s text;
// nullopt when it does not say.
std::optional<int64_t> largest_array_index(const std::string& config_text);

// The line of a Slurm command's output that says what went wrong, the most specific first: an
// option sbatch does not know ("unrecognized option"), else the first "error:" line, else the last
// non-empty line that is not advice to run --help.
std::string slurm_error(const std::string& output);

// sweep.slurm.options as given, for messages: [--partition=gpu, '--partition debug', ''].
std::string options_text(const std::vector<std::string>& options);

// Whether `result` is what task `index` of job array `job_id` wrote: a trials/NNN.json written
// by an earlier array (a stopped sweep whose tasks outlived it) is not this submission's result.
bool is_task_result(const TrialResult& result, const std::string& job_id, int64_t index);

// Writes <dir>/slurm/array.sh, submits `ids` as one job array with `options` and waits for its
// tasks, saying where it is (done / running / pending / failed, the job id) every 30 s at least
// and on every change. A stop signal cancels the array (scancel) and waits for its tasks to end.
// A task that cannot read the sweep folder or run `executable` on its node cancels the array and
// throws UserError naming them and the node; sbatch refusing the job throws UserError, after
// cancelling what it may have submitted (a job id it printed, or, when it did not answer in time,
// the jobs running this sweep's script). "Done" counts the tasks whose own result is there
// (is_task_result).
SlurmOutcome run_slurm_array(const std::filesystem::path& dir,
                             const std::filesystem::path& executable,
                             const std::vector<int64_t>& ids,
                             const std::vector<std::string>& options);

// The row of trial `id` whose task ended without a result: Slurm's state, exit code and node, and
// the last line of the trial's log (`why`, when given, instead: e.g. another array's result).
TrialResult failed_task_result(const SlurmTask& task, const std::string& job_id, int64_t id,
                               const std::filesystem::path& log, const std::string& why = "");

// scontrol -o show job's records parsed into the tasks they cover (a pending record covers a
// range such as "3-5,7%2").
std::map<int64_t, SlurmTask> parse_scontrol_records(const std::string& text);

}  // namespace training
