// The Slurm launcher's reading of Slurm (sweep_slurm.h): scontrol's records, a task's row, the
// line of a command's output that says what went wrong, and the checks before the folder exists.
#include <ctime>
#include <iomanip>
#include <regex>
#include <set>
#include <sstream>

#include "training/platform/errors.h"
#include "training/platform/process.h"
#include "training/studies/sweep_slurm.h"

namespace training {

namespace fs = std::filesystem;

namespace {

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

// scontrol's time "2026-12-05T18:00:07" in seconds (both ends of a span read alike); -1 else.
double slurm_time(const std::string& text) {
  std::tm tm{};
  std::istringstream in(text);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  return in.fail() ? -1.0 : static_cast<double>(timegm(&tm));
}

// Why a task was pending: stale once it started.
bool pending_reason(const std::string& reason) {
  static const std::string pending =  // Slurm's reasons, each between blanks
      " Priority Dependency Resources BeginTime JobHeldUser JobHeldAdmin ReqNodeNotAvail "
      "JobArrayTaskLimit Reservation Licenses None PartitionNodeLimit PartitionDown "
      "PartitionTimeLimit QOSJobLimit AssocJobLimit ";
  return pending.find(" " + reason + " ") != std::string::npos ||
         reason.rfind("ReqNodeNotAvail", 0) == 0;
}

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
  const bool stale = !node.empty() && pending_reason(reason);  // it started: no longer pending
  if (!reason.empty() && reason != "None" && state != "COMPLETED" && !stale) {
    text += ", reason " + reason;
  }
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
    const double start = slurm_time(field(line, "StartTime")),
                 end = slurm_time(field(line, "EndTime"));
    if (task.ended() && !task.node.empty() && start >= 0 && end >= start) {
      task.elapsed_seconds = end - start;
    }
    for (int64_t id : expand_indices(indices)) tasks[id] = task;
  }
  return tasks;
}

TrialResult failed_task_result(const SlurmTask& task, const std::string& job_id, int64_t id,
                               const fs::path& log, const std::string& why) {
  TrialResult result;
  result.status = TrialStatus::Error;
  const std::string last = why.empty() ? last_line(log) : why;
  result.message = "slurm task " + job_id + "_" + std::to_string(id) + ": " + task.describe() +
                   (last.empty() ? "" : ": " + last);
  result.host = task.node;
  result.job_id = job_id;
  result.array_index = id;
  return result;
}

bool is_task_result(const TrialResult& result, const std::string& job_id, int64_t index) {
  return !job_id.empty() && result.job_id == job_id && result.array_index == index;
}

std::string slurm_error(const std::string& output) {
  std::istringstream in(output);
  std::string line, first_error, last;
  while (std::getline(in, line)) {
    if (line.find("unrecognized option") != std::string::npos ||
        line.find("invalid option") != std::string::npos ||
        line.find("requires an argument") != std::string::npos) {
      return line;
    }
    if (first_error.empty() && line.find("error:") != std::string::npos) first_error = line;
    if (!line.empty() && line.rfind("Try ", 0) != 0) last = line;
  }
  if (!first_error.empty()) return first_error;
  return last.empty() ? "(no output)" : last;
}

std::string options_text(const std::vector<std::string>& options) {
  std::string out;
  for (const auto& o : options) {
    const bool plain = !o.empty() && o.find_first_of(" \t'\",[]") == std::string::npos;
    out += (out.empty() ? "" : ", ") + (plain ? o : shell_word(o));
  }
  return "[" + out + "]";
}

std::optional<int64_t> largest_array_index(const std::string& config_text) {
  const std::regex pattern("(^|\\n)\\s*MaxArraySize\\s*=\\s*(\\d+)");
  std::smatch m;
  if (!std::regex_search(config_text, m, pattern)) return std::nullopt;
  return std::stoll(m[2].str()) - 1;
}

void check_slurm(const std::vector<std::string>& options, int64_t trials) {
  for (const char* tool : {"sbatch", "scontrol", "scancel"}) {
    if (find_on_path(tool).empty()) {
      throw UserError(std::string("sweep.launcher: slurm: ") + tool +
                      " is not on PATH (install Slurm's client commands, or run the sweep with "
                      "--launcher local)");
    }
  }
  const CommandOutput config = run_command({"scontrol", "show", "config"}, 60);
  if (config.exit_code != 0) {
    throw UserError(
        "sweep.launcher: slurm: the Slurm controller did not answer (scontrol show config: " +
        slurm_error(config.output) + ")");
  }
  if (const auto largest = largest_array_index(config.output); largest && trials > *largest) {
    throw UserError("sweep.launcher: slurm: the grid's " + std::to_string(trials) +
                    " trials are more than one job array takes on this cluster (MaxArraySize " +
                    std::to_string(*largest + 1) + ": array indices up to " +
                    std::to_string(*largest) + "); sweep fewer batch sizes or settings");
  }
  std::vector<std::string> argv = {"sbatch", "--test-only", "--job-name=train-sweep"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back("--wrap=true");
  const CommandOutput out = run_command(argv, 60);
  if (out.exit_code != 0) {
    throw UserError(options.empty() ? "sweep.launcher: slurm: sbatch --test-only failed (no "
                                      "sweep.slurm.options given): " +
                                          slurm_error(out.output)
                                    : "sweep.slurm.options: sbatch refuses " +
                                          options_text(options) + ": " + slurm_error(out.output));
  }
}

}  // namespace training
