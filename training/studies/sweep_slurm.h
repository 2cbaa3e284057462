// sweep.launcher: slurm -- a sweep's trials as the tasks of one Slurm job array, submitted with
// sbatch --array (array index = trial id), followed with scontrol, cancelled with scancel. Each
// task runs the trial the local launcher would run (`train sweep-trial`) on the trial's files in
// the sweep folder, which must be on a filesystem the nodes share, as must `train` itself.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "training/studies/trial.h"

namespace training {

// One array task as Slurm reports it.
struct SlurmTask {
  std::string state;  // PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, NODE_FAIL, ...; "" unknown
  std::string exit_code;  // "status:signal", e.g. "0:9"
  std::string node;
  std::string reason;            // why it is pending or failed ("None" when Slurm gives none)
  bool ended() const;            // a final state, or no longer known to Slurm
  std::string describe() const;  // "FAILED (exit code 0:9, killed by signal 9) on node b"
};

struct SlurmOutcome {
  std::string job_id;
  std::map<int64_t, SlurmTask> tasks;  // by array index (the trial id)
  bool stopped = false;                // a stop signal came and the array was cancelled
};

// Refuses (UserError, one line) before the sweep folder exists: no sbatch, scontrol or scancel
// on PATH, or sbatch refusing `options` (a job tried with sbatch --test-only: nothing runs).
void check_slurm(const std::vector<std::string>& options);

// Writes <dir>/slurm/array.sh, submits `ids` as one job array with `options` and waits for its
// tasks, saying where it is (done / running / pending / failed, the job id) every 30 s at least
// and on every change. A stop signal cancels the array (scancel) and waits for its tasks to end.
// A task that cannot read the sweep folder or run `executable` on its node cancels the array and
// throws UserError naming them and the node; sbatch refusing the job throws UserError.
SlurmOutcome run_slurm_array(const std::filesystem::path& dir,
                             const std::filesystem::path& executable,
                             const std::vector<int64_t>& ids,
                             const std::vector<std::string>& options);

// The row of trial `id` whose task ended without a result: Slurm's state, exit code and node, and
// the last line of the trial's log.
TrialResult failed_task_result(const SlurmTask& task, const std::string& job_id, int64_t id,
                               const std::filesystem::path& log);

// scontrol -o show job's records parsed into the tasks of `ids` they cover (a pending record
// covers a range such as "3-5,7%2").
std::map<int64_t, SlurmTask> parse_scontrol_records(const std::string& text);

}  // namespace training
