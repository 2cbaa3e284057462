// A graceful stop: the first SIGINT/SIGTERM/SIGHUP asks the trainer to finish the current step,
// write a checkpoint and exit; a second one ends the process at once (exit 130, one line), except
// during a durable write (DeferRepeatedStops), which finishes first.
//
// One stop passed on twice is one stop: the same signal from the same process (its sender,
// siginfo's si_pid) within kSameStopSeconds of the one counted. GNU `timeout` sends it to the
// process and then to its process group, microseconds apart; a terminal's Ctrl-C is the kernel's
// (no sender), so each press counts, however fast; and no one types two commands 0.1 s apart.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace training {

inline constexpr double kSameStopSeconds = 0.1;

// SIGHUP (the terminal closed, an ssh session dropped) is a stop like SIGTERM, unless it was
// ignored when the process started (nohup): then it stays ignored.

// Before a command can stop gracefully: a stop signal exits 130 at once after one line on stderr,
// once an atomic write under way (DeferRepeatedStops) has finished, so no temporary is left.
void install_exit_on_stop();
// While one lives, the stop line also goes to `file` if it is a regular file (never created), in
// place of the one set before: a run's train.log, from RunDirectory or ResumedRunLog (run_dir.h).
class StopLineFile {
 public:
  explicit StopLineFile(const std::filesystem::path& file);
  ~StopLineFile();
  StopLineFile(const StopLineFile&) = delete;
  StopLineFile& operator=(const StopLineFile&) = delete;

 private:
  int fd_ = -1;
  int previous_ = -1;
};
// From here on stop signals (a deferred one too) are ignored: the outputs are complete (marked
// finished), so the command exits 0, not 130 with a folder that cannot be used again.
void ignore_stops_from_now();
// The graceful stop (the flag below), for loops that check it.
void install_stop_handlers();
bool stop_requested();
void request_stop();  // what the handler does; also lets tests trigger a stop
void clear_stop_request();

// While set, a stop that ends the process at once (a repeated signal, or any under
// install_exit_on_stop) first runs `argv` (an absolute path, then its arguments; e.g. scancel and
// a job id) and waits for it: what this process started elsewhere stops with it. Empty: nothing.
void run_on_exit_at_once(const std::vector<std::string>& argv);

// While one lives (an atomic write), a stop that exits at once waits for it. Nests.
class DeferRepeatedStops {
 public:
  DeferRepeatedStops();
  ~DeferRepeatedStops();
  DeferRepeatedStops(const DeferRepeatedStops&) = delete;
  DeferRepeatedStops& operator=(const DeferRepeatedStops&) = delete;
};

// Test hooks, to die or stop at an exact instant: SIGKILL where TRAIN_TEST_KILL_AT names `point`;
// what SIGINT would do where TRAIN_TEST_STOP_AT names it.
void test_kill_point(const char* point);
void test_stop_point(const std::string& point);

}  // namespace training
