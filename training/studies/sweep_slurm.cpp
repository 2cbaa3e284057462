#include "training/studies/sweep_slurm.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <regex>
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

// The line of a command's output that says what went wrong: its first "error:" line, else its
// last non-empty line.
std::string error_of(const std::string& output) {
  std::istringstream in(output);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find("error:") != std::string::npos) return line;
    if (!line.empty()) last = line;
  }
  return last.empty() ? "(no output)" : last;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::string array_script(const fs::path& dir, const fs::path& executable) {
  return "#!/bin/sh\n"
         "# Written by train sweep: array task N runs trial N of this sweep folder\n"
         "# (trials/NNN.yaml -> trials/NNN.json, its output in trials/NNN.log).\n"
         "#SBATCH --job-name=train-sweep\n"
         "#SBATCH --output=/dev/null\n"
         "#SBATCH --no-requeue\n"
         "dir=" +
         shell_word(dir.string()) +
         "\n"
         "train=" +
         shell_word(executable.string()) +
         "\n"
         "id=$(printf %03d \"$SLURM_ARRAY_TASK_ID\")\n"
         "[ -r \"$dir/trials/$id.yaml\" ] && [ -w \"$dir/trials\" ] || exit " +
         std::to_string(kFolderNotVisible) +
         "\n"
         "[ -x \"$train\" ] || exit " +
         std::to_string(kTrainNotVisible) +
         "\n"
         "exec \"$train\" sweep-trial --config \"$dir/trials/$id.yaml\" "
         "--result \"$dir/trials/$id.json\" >>\"$dir/trials/$id.log\" 2>&1\n";
}

// "3-5,7%2" -> 3, 4, 5, 7.
std::vector<int64_t> expand_indices(std::string text) {
  text = text.substr(0, text.find('%'));
  std::vector<int64_t> out;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    const auto dash = part.find('-');
    try {
      const int64_t first = std::stoll(part.substr(0, dash));
      const int64_t last = dash == std::string::npos ? first : std::stoll(part.substr(dash + 1));
      for (int64_t i = first; i <= last && i - first < 100000; ++i) out.push_back(i);
    } catch (const std::exception&) {
      // not a number: not a task of ours
    }
  }
  return out;
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
                     error_of(out.output));
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
        task.state.clear();
      }
    }
  }

  bool all_ended() const {
    for (const auto& [id, task] : tasks_) {
      if (!task.ended()) return false;
    }
    return true;
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

  // Says where the array is when that changed, and every 30 s at least.
  void say() {
    int done = 0, failed = 0, running = 0, pending = 0;
    for (const auto& [id, task] : tasks_) {
      if (task.ended()) {
        (fs::exists(dir_ / "trials" / fmt::format("{:03d}.json", id)) ? done : failed)++;
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
    if (out.exit_code != 0) spdlog::warn("scancel {}: {}", job_, error_of(out.output));
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
  fs::path dir_;
  std::string job_;
  std::map<int64_t, SlurmTask> tasks_;
  std::string said_;
  std::chrono::steady_clock::time_point last_said_{};
};

}  // namespace

bool SlurmTask::ended() const {
  static const std::set<std::string> active = {
      "PENDING",  "RUNNING",   "CONFIGURING", "COMPLETING",   "SUSPENDED",   "REQUEUED",
      "RESIZING", "SIGNALING", "STAGE_OUT",   "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"};
  return active.count(state) == 0;
}

std::string SlurmTask::describe() const {
  std::string text = state.empty() ? "ended, no longer known to Slurm" : state;
  if (!exit_code.empty() && exit_code != "0:0") {
    text += " (exit code " + exit_code;
    const auto colon = exit_code.find(':');
    if (colon != std::string::npos && exit_code.substr(colon + 1) != "0") {
      text += ", killed by signal " + exit_code.substr(colon + 1);
    }
    text += ")";
  }
  if (!node.empty()) text += " on node " + node;
  if (!reason.empty() && reason != "None" && state != "COMPLETED") text += ", reason " + reason;
  return text;
}

std::map<int64_t, SlurmTask> parse_scontrol_records(const std::string& text) {
  std::map<int64_t, SlurmTask> tasks;
  auto field = [](const std::string& line, const std::string& key) {
    const std::regex pattern("(^|\\s)" + key + "=(\\S*)");
    std::smatch m;
    return std::regex_search(line, m, pattern) ? m[2].str() : std::string();
  };
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::string indices = field(line, "ArrayTaskId");
    if (indices.empty()) continue;
    SlurmTask task;
    task.state = field(line, "JobState");
    task.exit_code = field(line, "ExitCode");
    task.node = field(line, "NodeList");
    if (task.node == "(null)") task.node.clear();
    task.reason = field(line, "Reason");
    for (int64_t id : expand_indices(indices)) tasks[id] = task;
  }
  return tasks;
}

TrialResult failed_task_result(const SlurmTask& task, const std::string& job_id, int64_t id,
                               const fs::path& log) {
  TrialResult result;
  result.status = TrialStatus::Error;
  const std::string last = last_line(log);
  result.message = "slurm task " + job_id + "_" + std::to_string(id) + ": " + task.describe() +
                   (last.empty() ? "" : ": " + last);
  result.host = task.node;
  result.job_id = job_id;
  result.array_index = id;
  return result;
}

void check_slurm(const std::vector<std::string>& options) {
  for (const char* tool : {"sbatch", "scontrol", "scancel"}) {
    if (find_on_path(tool).empty()) {
      throw UserError(std::string("sweep.launcher: slurm: ") + tool +
                      " is not on PATH (install Slurm's client commands, or run the sweep with "
                      "--launcher local)");
    }
  }
  std::vector<std::string> argv = {"sbatch", "--test-only", "--job-name=train-sweep"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back("--wrap=true");
  const CommandOutput out = run_command(argv, 60);
  if (out.exit_code != 0) {
    throw UserError("sweep.slurm.options: sbatch refuses [" + joined(options) +
                    "]: " + error_of(out.output));
  }
}

SlurmOutcome run_slurm_array(const fs::path& dir, const fs::path& executable,
                             const std::vector<int64_t>& ids,
                             const std::vector<std::string>& options) {
  const fs::path script = dir / "slurm" / "array.sh";
  std::error_code ec;
  fs::create_directories(script.parent_path(), ec);
  write_file_atomically(script, array_script(fs::absolute(dir), fs::absolute(executable)));
  std::string indices;
  for (int64_t id : ids) indices += (indices.empty() ? "" : ",") + std::to_string(id);
  std::vector<std::string> argv = {"sbatch", "--parsable", "--array=" + indices};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back(script.string());
  const CommandOutput out = run_command(argv, 120);
  SlurmOutcome outcome;
  outcome.job_id = out.output.substr(0, out.output.find_first_of(";\n"));
  if (out.exit_code != 0 || outcome.job_id.empty() ||
      outcome.job_id.find_first_not_of("0123456789") != std::string::npos) {
    throw UserError("sweep.slurm.options: sbatch refused the job array [" + joined(options) +
                    "]: " + error_of(out.output));
  }
  spdlog::info("slurm: job array {} submitted, {} task(s) (array index = trial id; {})",
               outcome.job_id, ids.size(),
               options.empty() ? "no sbatch options" : "sbatch " + joined(options));
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
