#include "training/run/run_dir.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <utility>

#include "training/config/config_yaml.h"
#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"
#include "training/platform/json_rows.h"
#include "training/platform/process.h"
#include "training/run/checkpoint_io.h"
#include "training/run/output_dir.h"

namespace training {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

int remove_stale_temporaries(const fs::path& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // ".<file>.tmp<pid>", as atomic_file.cpp names them.
    if (name.size() > 1 && name[0] == '.' && name.find(".tmp") != std::string::npos &&
        entry.is_regular_file(ec)) {
      removed += fs::remove(entry.path(), ec) ? 1 : 0;
    }
  }
  return removed;
}

Decisions read_decisions(const fs::path& run_dir, const Config& asked) {
  std::error_code ec;
  const fs::path file = run_dir / "decisions.json";
  auto checked = [&](const std::string& json, const std::string& origin) {
    Decisions decisions = parse_decisions(json, origin);
    check_decisions(decisions, asked, origin);
    return decisions;
  };
  if (fs::exists(file, ec) || fs::is_symlink(file, ec)) {
    return checked(read_whole_file(file), file.string());
  }
  // decisions.json gone: the checkpoint holds them too.
  const fs::path checkpoint = run_dir / "checkpoint.pt";
  if (fs::is_regular_file(checkpoint, ec)) {
    const std::string stored = checkpoint_inputs(checkpoint).decisions_json;
    if (!stored.empty()) return checked(stored, checkpoint.string() + " (stored decisions)");
  }
  return {};
}

RecordedInputs recorded_inputs(const fs::path& run_dir) {
  const fs::path config_file = run_dir / "config.yaml";
  if (!fs::exists(config_file)) throw UserError(config_file.string() + ": not found");
  // The files are read and checked first: one that train never writes is refused naming it.
  RecordedInputs files{load_config(config_file.string(), {}, ConfigRead::Record), {}, ""};
  files.decisions = read_decisions(run_dir, files.asked);
  std::error_code ec;
  const fs::path checkpoint = run_dir / "checkpoint.pt";
  std::optional<RunInputs> stored;
  if (fs::is_regular_file(checkpoint, ec)) {
    try {
      stored = checkpoint_inputs(checkpoint);
    } catch (const std::exception&) {  // a damaged checkpoint is --resume's to refuse
    }
  }
  if (!stored) return files;
  const std::string origin = checkpoint.string() + " (stored inputs)";
  RecordedInputs recorded{
      parse_config(stored->config_yaml, origin, {}, ConfigRead::Record), {}, ""};
  if (!stored->decisions_json.empty()) {
    recorded.decisions = parse_decisions(stored->decisions_json, origin);
    check_decisions(recorded.decisions, recorded.asked, origin);
  }
  std::vector<std::string> edited;  // each compared as train writes it
  if (run_yaml(files.asked) != run_yaml(recorded.asked)) edited.push_back("config.yaml");
  if (decisions_json(files.decisions) != decisions_json(recorded.decisions)) {
    edited.push_back("decisions.json");
  }
  if (edited.empty()) return files;
  recorded.note = config_yaml::join(edited, " and ") +
                  (edited.size() == 1 ? " differs" : " differ") + " from what " +
                  checkpoint.string() +
                  " records the run trained with (edited since the run wrote it?): shown as the "
                  "checkpoint records it";
  return recorded;
}

namespace {

// train.log of a run folder that closed as an error left it, for that error's line
// (log_final_error); a folder opened since makes it stale.
struct ClosedRun {
  std::shared_ptr<spdlog::sinks::sink> sink;
  fs::path log;
};
ClosedRun& closed_by_error() {
  static ClosedRun closed;
  return closed;
}

// The rows of the epochs the checkpoint has done (`epochs_done`), each there: fewer is a file
// removed or cut by hand, which `what` would take for the run's record.
void check_rows_cover(const fs::path& dir, const std::vector<EpochRecord>& rows,
                      int64_t epochs_done, const std::string& what) {
  const auto done = std::count_if(rows.begin(), rows.end(),
                                  [&](const EpochRecord& r) { return r.epoch <= epochs_done; });
  if (done < epochs_done) {
    throw UserError((dir / "metrics.jsonl").string() + ": holds " + std::to_string(done) +
                    " of the " + std::to_string(epochs_done) +
                    " epoch(s) its checkpoint has done (removed or cut), and " + what +
                    "; put its rows back (metrics.csv holds them) first");
  }
}

// Whether a checkpoint at `epoch` epochs and `step` steps holds the row `record`: the rows of its
// epochs, and that of an epoch training.max_steps ended part-way at `step` itself.
bool checkpoint_holds(const EpochRecord& record, int64_t epoch, int64_t step) {
  return record.epoch <= epoch || (record.epoch == epoch + 1 && record.step == step);
}

}  // namespace

void check_run_to_resume(const fs::path& dir, int64_t epochs_done, const Config& config) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UserError(dir.string() + ": run directory not found");
  if (locked_by_another_process(dir)) DirectoryLock{dir};  // refuses, naming the holder
  refuse_unwritable_folder(dir, dir, "--resume");
  check_adoptable_as_run(dir);
  // Each file the run writes or adds to, one it can write (a folder, or an immutable file, was
  // found after training: the resumed epochs' samples or plots lost, report.md exit 2).
  // What this resume does not write (its profiler, snapshot or sampler off) stands as it is.
  const std::map<std::string, bool> writes = {{"trace.json", config.profiler.enabled},
                                              {"memory_snapshot.pickle", config.memory.snapshot},
                                              {"gpu.jsonl", config.monitor.sample_period > 0}};
  for (const char* name : kRunFiles) {
    if (const auto off = writes.find(name); off != writes.end() && !off->second) continue;
    const fs::path file = dir / name;
    if (!fs::exists(fs::symlink_status(file, ec))) continue;
    if (!fs::is_regular_file(file, ec))
      throw UserError(file.string() + ": not a file, and a resume rewrites it; move it away");
    if (::access(file.c_str(), W_OK) != 0) {
      throw UserError(file.string() + ": cannot be written (" + std::strerror(errno) +
                      "), and a resume rewrites it");
    }
  }
  check_rows_cover(dir, read_metrics(dir / "metrics.jsonl"), epochs_done,
                   "a resume rewrites metrics.csv from it");
}

RunDirectory::RunDirectory(fs::path dir, bool resuming, const std::string& named_by)
    : dir_(std::move(dir)), uncaught_(std::uncaught_exceptions()) {
  closed_by_error() = {};
  std::error_code ec;
  if (resuming) {
    if (!fs::is_directory(dir_, ec)) throw UserError(dir_.string() + ": run directory not found");
    lock_ = std::make_unique<DirectoryLock>(dir_);
    adopt_as_run(dir_);  // a checkpoint file resumed in a folder without a marker
  } else {
    lock_ = claim_output_dir(dir_, OutputKind::Run, named_by);
  }
  const int stale = remove_stale_temporaries(dir_);
  if (resuming) epochs_ = read_metrics(dir_ / "metrics.jsonl");
  try {
    log_sink_ = std::make_shared<spdlog::sinks::basic_file_sink_mt>((dir_ / "train.log").string());
  } catch (const spdlog::spdlog_ex& e) {
    throw UserError((dir_ / "train.log").string() + ": cannot open the log for writing (" +
                    e.what() + ")");
  }
  spdlog::default_logger()->sinks().push_back(log_sink_);
  // A stop before the graceful handlers (stop_signal.h) says so in train.log too.
  stop_line_.emplace(dir_ / "train.log");
  if (stale > 0) {
    spdlog::info("removed {} temporary file(s) an interrupted write left in {}", stale,
                 dir_.string());
  }
}

RunDirectory::~RunDirectory() {
  // Detach train.log so a later run in the same process logs to its own directory.
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), log_sink_), sinks.end());
  if (std::uncaught_exceptions() > uncaught_) closed_by_error() = {log_sink_, dir_ / "train.log"};
}

ResumedRunLog::ResumedRunLog(fs::path train_log)
    : file_(std::move(train_log)), stop_line_(file_), uncaught_(std::uncaught_exceptions()) {}

ResumedRunLog::~ResumedRunLog() {
  // A RunDirectory that closed as the error left it has set its own sink already.
  if (std::uncaught_exceptions() <= uncaught_ || closed_by_error().sink) return;
  std::error_code ec;
  if (!fs::is_regular_file(file_, ec)) return;
  try {
    closed_by_error() = {std::make_shared<spdlog::sinks::basic_file_sink_mt>(file_.string()),
                         file_};
  } catch (const spdlog::spdlog_ex&) {  // the terminal has the line
  }
}

void log_final_error(spdlog::level::level_enum level, const std::string& line) {
  const auto sink = std::exchange(closed_by_error(), {}).sink;
  auto& sinks = spdlog::default_logger()->sinks();
  if (sink) sinks.push_back(sink);
  spdlog::log(level, "{}", line);
  if (sink) sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
}

ClosedRunLog::ClosedRunLog() : sink_(closed_by_error().sink) {
  if (!sink_) return;
  spdlog::default_logger()->sinks().push_back(sink_);
  stop_line_.emplace(closed_by_error().log);
}

ClosedRunLog::~ClosedRunLog() {
  auto& sinks = spdlog::default_logger()->sinks();
  if (sink_) sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
}

void RunDirectory::write_inputs(const RunInputs& inputs) const {
  // The record first: a write that fails leaves config.yaml, which a resume reads for hand edits,
  // as it was (decisions.json is only a record; the checkpoint holds the decisions a resume uses).
  write_file_atomically(dir_ / "decisions.json", inputs.decisions_json);
  write_file_atomically(dir_ / "config.yaml", inputs.config_yaml);
}

void RunDirectory::record_epoch(const EpochRecord& record) {
  auto same = std::find_if(epochs_.begin(), epochs_.end(),
                           [&](const EpochRecord& r) { return r.epoch == record.epoch; });
  if (same != epochs_.end()) {
    *same = record;
  } else {
    epochs_.push_back(record);
  }
  write_metrics();
}

void RunDirectory::keep_epochs_through(int64_t epoch, int64_t step) {
  epochs_.erase(
      std::remove_if(epochs_.begin(), epochs_.end(),
                     [&](const EpochRecord& r) { return !checkpoint_holds(r, epoch, step); }),
      epochs_.end());
  write_metrics();
}

void RunDirectory::write_metrics() const {
  std::vector<ordered_json> rows;
  std::string jsonl;
  for (const auto& record : epochs_) {
    rows.push_back(to_json(record));
    jsonl += rows.back().dump() + "\n";
  }
  write_file_atomically(dir_ / "metrics.jsonl", jsonl);
  write_file_atomically(dir_ / "metrics.csv", rows_to_csv(rows));
}

std::vector<EpochRecord> read_metrics(const fs::path& file) {
  std::vector<EpochRecord> records;
  const auto rows = read_jsonl(file);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string where = file.string() + " row " + std::to_string(i + 1);
    records.push_back(epoch_record_from_json(rows[i], where));
    // train writes each epoch once, in order from 1 (a redone epoch replaces its row), each at no
    // fewer steps than the last: anything else was edited by hand, and would be reported as another
    // run (fifteenth pass: a gap, epoch 3 after 1, and a step going down were reported).
    const EpochRecord& row = records.back();
    const EpochRecord* before = records.size() > 1 ? &records[records.size() - 2] : nullptr;
    const std::string edited = "(the file was edited or damaged)";
    if (row.epoch != (before ? before->epoch + 1 : 1)) {
      throw UserError(where + ": epoch " + std::to_string(row.epoch) +
                      (before ? " after epoch " + std::to_string(before->epoch) : " first") +
                      "; a run records each epoch once, in order from 1 " + edited);
    }
    if (before && row.step < before->step) {
      throw UserError(where + ": step " + std::to_string(row.step) + " after step " +
                      std::to_string(before->step) + " (epoch " + std::to_string(before->epoch) +
                      "'s); a run's steps only grow " + edited);
    }
  }
  return records;
}

RunRecord recorded_run(const fs::path& run_dir, const std::string& what, bool in_training) {
  // The checkpoint first: a run being trained writes an epoch's row before its checkpoint, so read
  // the other way round a healthy run could lack a row (and one in training is not judged).
  RunRecord record;
  std::optional<TrainState>& at = record.checkpoint;
  std::error_code ec;
  if (fs::is_regular_file(run_dir / "checkpoint.pt", ec)) {
    try {
      at = checkpoint_position(run_dir / "checkpoint.pt");
    } catch (const std::exception&) {  // a damaged checkpoint is --resume's to refuse
    }
  }
  auto& epochs = record.epochs = read_metrics(run_dir / "metrics.jsonl");
  if (at && !in_training) {  // none at all too: a resume refuses that run as "holds 0 of ..."
    check_rows_cover(run_dir, epochs, at->epoch, "the " + what + " would be of those");
  }
  if (!epochs.empty()) return record;
  const bool resumable = !in_training && fs::exists(run_dir / "checkpoint.pt");
  throw UserError(run_dir.string() +
                  ": a run with no epoch recorded yet (no metrics.jsonl rows: training, or stopped "
                  "in its first epoch), so nothing to " +
                  what +
                  (resumable ? "; continue it with: " + advised_program() + " --resume " +
                                   shell_word(run_dir.string())
                             : ""));
}

void configure_console_logging() {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(spdlog::level::info);
  auto logger = std::make_shared<spdlog::logger>("train", console);
  logger->set_level(spdlog::level::trace);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

fs::path new_run_path(const fs::path& parent, const std::string& name, const std::string& arch) {
  if (!name.empty()) return parent / name;
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  fs::path path = parent / (std::string(stamp) + "-" + arch);
  for (int n = 2; fs::exists(path); ++n) {
    path = parent / (std::string(stamp) + "-" + arch + "-" + std::to_string(n));
  }
  return path;
}

OutputFolder output_folder(const std::string& output_dir_flag, const Config& config,
                           const std::string& what, bool takes_name) {
  if (!output_dir_flag.empty()) return {output_dir_flag, "--output-dir", ""};
  if (takes_name && !config.output.name.empty()) {
    const fs::path path = fs::path(config.output.dir) / config.output.name;
    std::error_code ec;
    return {path, fs::exists(path, ec) ? "output.name" : "output.dir/output.name", ""};
  }
  return {new_run_path(config.output.dir, "", what), "output.dir", what};
}

fs::path OutputFolder::to_claim() const {
  return dated_what.empty() ? path : new_run_path(path.parent_path(), "", dated_what);
}

}  // namespace training
