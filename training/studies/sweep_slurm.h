// sweep.launcher: slurm -- a sweep's trials as the tasks of one Slurm job array (sbatch --array,
// array index = trial id; scontrol, scancel), each running `train sweep-trial` on its files in the
// sweep folder, which must be on a filesystem the nodes share, as must `train` itself.
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

// Refuses (UserError, one line) before the sweep folder exists: no sbatch, scontrol or scancel on
// PATH, a controller that does not answer, `trials` above MaxArraySize - 1, or sbatch --test-only
// refusing `options`.
void check_slurm(const std::vector<std::string>& options, int64_t trials);

// The most trials a job array takes: MaxArraySize - 1 in `scontrol show config`'s text, if any.
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
// tasks, saying where it is every 30 s at least and on every change. A stop signal cancels the
// array and waits for its tasks. UserError (the array cancelled) where a task's node cannot see
// the sweep folder or `executable`, and where sbatch refuses the job (what it may have submitted
// cancelled: the job id it printed, or the jobs running this sweep's script).
SlurmOutcome run_slurm_array(const std::filesystem::path& dir,
                             const std::filesystem::path& executable,
                             const std::vector<int64_t>& ids,
                             const std::vector<std::string>& options);

// The row of trial `id` whose task ended without a result: Slurm's state, exit code and node, and
// the last line of the trial's log (`why`, when given, instead: e.g. another array's result).
TrialResult failed_task_result(const SlurmTask& task, const std::string& job_id, int64_t id,
                               const std::filesystem::path& log, const std::string& why = "");

// scontrol -o show job's records, as the tasks they cover (a pending one a range: "3-5,7%2").
std::map<int64_t, SlurmTask> parse_scontrol_records(const std::string& text);

}  // namespace training
