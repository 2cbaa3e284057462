#include "training/studies/sweep_slurm.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"
#include "training/platform/process.h"
#include "training/platform/stop_signal.h"

namespace training {

namespace fs = std::filesystem;

namespace {

// What the array's script exits with when its node cannot see the sweep's files.
constexpr int kFolderNotVisible = 97;
constexpr int kTrainNotVisible = 98;
constexpr auto kPoll = std::chrono::seconds(1);
constexpr auto kSayAtLeastEvery = std::chrono::seconds(30);
constexpr int64_t kSbatchSeconds = 120;

std::string array_script(const fs::path& dir, const fs::path& executable) {
  return fmt::format(
      "#!/bin/sh\n# Written by train sweep: array task N runs trial N of this sweep folder\n# "
      "(trials/NNN.yaml -> trials/NNN.json, its output in trials/NNN.log).\n#SBATCH "
      "--job-name=train-sweep\n#SBATCH --output=/dev/null\n#SBATCH "
      "--no-requeue\ndir={}\ntrain={}\nid=$(printf %03d \"$SLURM_ARRAY_TASK_ID\")\n[ -r "
      "\"$dir/trials/$id.yaml\" ] && [ -w \"$dir/trials\" ] || exit {}\n[ -x \"$train\" ] || exit "
      "{}\nexec \"$train\" sweep-trial --config \"$dir/trials/$id.yaml\" --result "
      "\"$dir/trials/$id.json\" >>\"$dir/trials/$id.log\" 2>&1\n",
      shell_word(dir.string()), shell_word(executable.string()), kFolderNotVisible,
      kTrainNotVisible);
}

class ArrayWatch {
 public:
  ArrayWatch(fs::path dir, std::string job, const std::vector<int64_t>& ids)
      : dir_(std::move(dir)), job_(std::move(job)) {
    for (int64_t id : ids) tasks_[id].state = "PENDING";
  }

  // Asks scontrol once; false when Slurm could not be asked (said at most every 30 s).
  void poll() {
    const CommandOutput out = run_command({"scontrol", "-o", "show", "job", job_}, 60);
    if (out.exit_code != 0) {
      if (out.output.find("Invalid job id") != std::string::npos) {
        for (auto& [id, task] : tasks_) {
          if (!task.ended()) task.state.clear();  // purged: ended, its state no longer known
        }
        return;
      }
      if (std::chrono::steady_clock::now() - last_said_ > kSayAtLeastEvery) {
        spdlog::warn("slurm job {}: scontrol failed ({}); asking again", job_,
                     slurm_error(out.output));
        last_said_ = std::chrono::steady_clock::now();
      }
      return;
    }
    const auto seen = parse_scontrol_records(out.output);
    for (auto& [id, task] : tasks_) {
      const auto found = seen.find(id);
      if (found != seen.end()) {
        task = found->second;
      } else if (!task.ended()) {
        task = ask_for_task(id);
      }
    }
  }

  bool all_ended() const {
    return std::all_of(tasks_.begin(), tasks_.end(),
                       [](const auto& t) { return t.second.ended(); });
  }

  // A task whose node cannot see the sweep folder or `train`: why, else "".
  std::string not_visible(const fs::path& executable) const {
    for (const auto& [id, task] : tasks_) {
      const std::string where = " on node " + (task.node.empty() ? "?" : task.node);
      if (task.exit_code == std::to_string(kFolderNotVisible) + ":0") {
        return "slurm job " + job_ + " task " + std::to_string(id) + where +
               " cannot read the sweep folder " + dir_.string() +
               ": put it on a filesystem the nodes share (--output-dir)";
      }
      if (task.exit_code == std::to_string(kTrainNotVisible) + ":0") {
        return "slurm job " + job_ + " task " + std::to_string(id) + where + " cannot run " +
               executable.string() + ": put train on a filesystem the nodes share";
      }
    }
    return "";
  }

  // Whether trials/NNN.json is this array's task `id`'s own result (is_task_result).
  bool has_result(int64_t id) {
    if (with_result_.count(id)) return true;
    try {
      std::ifstream in(dir_ / "trials" / fmt::format("{:03d}.json", id));
      if (in && is_task_result(trial_from_json(nlohmann::json::parse(in)), job_, id)) {
        with_result_.insert(id);
        return true;
      }
    } catch (const std::exception&) {
      // none yet, or not whole: not done
    }
    return false;
  }

  // Says where the array is when that changed, and every 30 s at least.
  void say() {
    int done = 0, failed = 0, running = 0, pending = 0;
    for (const auto& [id, task] : tasks_) {
      if (task.ended()) {
        (has_result(id) ? done : failed)++;
      } else {
        (task.state == "PENDING" ? pending : running)++;
      }
    }
    const std::string line = fmt::format("slurm job {}: {} done, {} running, {} pending, {} failed",
                                         job_, done, running, pending, failed);
    const auto now = std::chrono::steady_clock::now();
    if (line != said_ || now - last_said_ > kSayAtLeastEvery) {
      spdlog::info("{}", line);
      said_ = line;
      last_said_ = now;
    }
  }

  void cancel_and_wait() {
    const CommandOutput out = run_command({"scancel", job_}, 60);
    if (out.exit_code != 0) spdlog::warn("scancel {}: {}", job_, slurm_error(out.output));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      poll();
      if (all_ended()) return;
      std::this_thread::sleep_for(kPoll);
    }
    spdlog::warn("slurm job {}: tasks still listed 120 s after scancel (squeue -j {})", job_, job_);
  }

  const std::map<int64_t, SlurmTask>& tasks() const { return tasks_; }

 private:
  // A task the array's records no longer list while it had not ended (a task cancelled out of a
  // pending range, `scancel 25_1`), asked for by itself; "" state when Slurm no longer knows it.
  SlurmTask ask_for_task(int64_t id) const {
    const std::string name = job_ + "_" + std::to_string(id);
    const CommandOutput out = run_command({"scontrol", "-o", "show", "job", name}, 60);
    if (out.exit_code == 0) {
      const auto seen = parse_scontrol_records(out.output);
      if (const auto found = seen.find(id); found != seen.end()) return found->second;
    }
    return SlurmTask{};
  }

  fs::path dir_;
  std::string job_;
  std::map<int64_t, SlurmTask> tasks_;
  std::set<int64_t> with_result_;  // tasks whose own result was read
  std::string said_;
  std::chrono::steady_clock::time_point last_said_{};
};

// The job id sbatch --parsable printed ("123" or "123;cluster", on a line of its own among its
// warnings); "" when there is none.
std::string printed_job_id(const std::string& output) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const std::string id = line.substr(0, line.find(';'));
    if (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos) return id;
  }
  return "";
}

// What a failed sbatch may have submitted, cancelled: the job id it printed, else (it did not
// answer in time) the jobs Slurm runs `script` for (squeue's command column).
void cancel_submitted(const std::string& job_id, const fs::path& script) {
  std::vector<std::string> jobs;
  if (!job_id.empty()) {
    jobs.push_back(job_id);
  } else {
    try {
      const CommandOutput listed = run_command({"squeue", "-h", "-o", "%F %o"}, 60);
      std::istringstream in(listed.output);
      for (std::string line; std::getline(in, line);) {
        const auto space = line.find(' ');
        if (space != std::string::npos && line.substr(space + 1) == script.string()) {
          jobs.push_back(line.substr(0, space));
        }
      }
    } catch (const std::exception& e) {
      spdlog::warn("squeue: {}; jobs sbatch may have submitted for {} are not known", e.what(),
                   script.string());
    }
  }
  for (const auto& job : jobs) {
    const CommandOutput out = run_command({"scancel", job}, 60);
    spdlog::warn("slurm job {}: cancelled (sbatch failed after submitting it){}", job,
                 out.exit_code == 0 ? "" : ": scancel: " + slurm_error(out.output));
  }
}

// Submits `ids` as one array of `script`; its job id. A failure cancels what it may have
// submitted and throws UserError, blaming sweep.slurm.options only where there are some.
std::string submit_array(const fs::path& script, const std::vector<int64_t>& ids,
                         const std::vector<std::string>& options) {
  std::string indices;
  for (int64_t id : ids) indices += (indices.empty() ? "" : ",") + std::to_string(id);
  std::vector<std::string> argv = {"sbatch", "--parsable", "--array=" + indices};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back(script.string());
  const CommandOutput out = run_command(argv, kSbatchSeconds);
  const std::string job_id = printed_job_id(out.output);
  if (out.exit_code == 0 && !job_id.empty()) return job_id;
  cancel_submitted(job_id, script);
  const std::string said = out.exit_code == -1
                               ? "sbatch did not answer in " + std::to_string(kSbatchSeconds) + " s"
                               : slurm_error(out.output);
  throw UserError(options.empty()
                      ? "sweep.launcher: slurm: sbatch did not submit the job array: " + said
                      : "sweep.slurm.options: sbatch refused the job array " +
                            options_text(options) + ": " + said);
}

}  // namespace

SlurmOutcome run_slurm_array(const fs::path& dir, const fs::path& executable,
                             const std::vector<int64_t>& ids,
                             const std::vector<std::string>& options) {
  const fs::path script = fs::absolute(dir / "slurm" / "array.sh");
  std::error_code ec;
  fs::create_directories(script.parent_path(), ec);
  write_file_atomically(script, array_script(fs::absolute(dir), fs::absolute(executable)));
  SlurmOutcome outcome;
  outcome.job_id = submit_array(script, ids, options);
  // A second stop ends the process at once: it cancels the array first, as the first stop does.
  struct CancelOnExit {
    explicit CancelOnExit(const std::string& job) {
      run_on_exit_at_once({find_on_path("scancel"), job});
    }
    ~CancelOnExit() { run_on_exit_at_once({}); }
  } cancel_on_exit(outcome.job_id);
  spdlog::info("slurm: job array {} submitted, {} task(s) (array index = trial id; {})",
               outcome.job_id, ids.size(),
               options.empty() ? "no sbatch options" : "sbatch " + options_text(options));
  ArrayWatch watch(dir, outcome.job_id, ids);
  while (true) {
    if (stop_requested()) {
      spdlog::warn("slurm job {}: stopped by a signal; cancelling the job array (scancel)",
                   outcome.job_id);
      watch.cancel_and_wait();
      outcome.stopped = true;
      break;
    }
    watch.poll();
    if (const std::string why = watch.not_visible(executable); !why.empty()) {
      watch.cancel_and_wait();
      throw UserError(why + "; job array " + outcome.job_id + " cancelled");
    }
    watch.say();
    if (watch.all_ended()) break;
    std::this_thread::sleep_for(kPoll);
  }
  outcome.tasks = watch.tasks();
  return outcome;
}

}  // namespace training
