// Child processes for isolated sweep trials: a failed, crashed or out-of-memory trial cannot
// pollute the next one.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace training {

struct ProcessOutcome {
  int exit_code = -1;  // when the process exited normally
  int signal = 0;      // when a signal ended it (after a timeout: SIGKILL)
  bool timed_out = false;
  bool stopped = false;  // a stop signal (stop_signal.h) arrived and was passed on to it
  double seconds = 0;
  // "exit code 3", "killed by signal 11 (Segmentation fault)", "timed out after 5 s".
  std::string describe() const;
  // A stop reached the child itself, passed on or not (from a terminal, to the process group): it
  // exited as a stop (130), or SIGINT or SIGTERM ended it before its handlers were in place.
  bool ended_by_stop() const;
};

// Runs argv[0] (a path) with stdout and stderr appended to `log_file`; kills it after
// `timeout_seconds`. When this process is asked to stop (stop_signal.h: Ctrl-C, SIGTERM), passes
// SIGTERM on to the child and waits for it (SIGKILL after 10 s), so no child is left running.
// The child is killed when this process dies (PR_SET_PDEATHSIG), kill -9 included. Throws
// UserError when it cannot be started.
// `environment`: "NAME=value" entries set in the child's environment beside this process's
// (CUDA_VISIBLE_DEVICES for a sweep's trial on one GPU of several).
ProcessOutcome run_process(const std::vector<std::string>& argv,
                           const std::filesystem::path& log_file, int64_t timeout_seconds,
                           const std::vector<std::string>& environment = {});

// A short command's exit and its output (stdout and stderr together, at most 1 MiB kept).
struct CommandOutput {
  int exit_code = -1;  // -1: killed by a signal or after the timeout
  std::string output;
};
// Runs argv (argv[0] a name found on PATH, or a path) to its end or `timeout_seconds`, whatever
// this process's stop state (scancel must run during a stop). Throws UserError when it cannot
// be started (not found, not executable).
CommandOutput run_command(const std::vector<std::string>& argv, int64_t timeout_seconds);

// The path of `name` found on PATH, executable; "" when there is none.
std::string find_on_path(const std::string& name);

// The last non-empty line of a text file ("" when there is none): a crashed child's last words.
std::string last_line(const std::filesystem::path& file);

// The running executable (/proc/self/exe).
std::filesystem::path current_executable();

// The program as advice names it ("continue with: ./build/train --resume runs/x"), one shell word:
// the path it was run as (argv[0], set by main: `./build/train`, or `train` found on PATH) where
// that names this executable from here, else its absolute path (current_executable()).
void set_invoked_as(const std::string& argv0);
std::string advised_program();

// The Python that runs the plotting scripts: $TRAIN_PYTHON, else the project's virtualenv
// ($TRAIN_VENV or ~/.cache/train-studies/venv), else python3.
std::string python_executable();

// Runs scripts/<script> (from the source tree this binary was built from) with `arguments`,
// output to `log_file`, in python_executable(). Returns an empty string on success, else what went
// wrong; stopped, the command that draws them, naming that Python.
std::string run_python_script(const std::string& script, const std::vector<std::string>& arguments,
                              const std::filesystem::path& log_file);

}  // namespace training
