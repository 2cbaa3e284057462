// Child processes for sweep trials: a failed or crashed trial cannot pollute the next one.
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

// Runs argv[0] (a path), output appended to `log_file`, with `environment`'s "NAME=value" entries
// added (CUDA_VISIBLE_DEVICES); killed after `timeout_seconds` and when this process dies (kill -9
// too: PR_SET_PDEATHSIG). A stop of this process is passed on as SIGTERM (SIGKILL 10 s later), so
// no child is left running. Throws UserError when it cannot be started.
ProcessOutcome run_process(const std::vector<std::string>& argv,
                           const std::filesystem::path& log_file, int64_t timeout_seconds,
                           const std::vector<std::string>& environment = {});

// A short command's exit and its output (stdout and stderr together, at most 1 MiB kept).
struct CommandOutput {
  int exit_code = -1;  // -1: killed by a signal or after the timeout
  std::string output;
};
// Runs argv (argv[0] on PATH, or a path) to its end or `timeout_seconds`, stopping or not (scancel
// must run during a stop); UserError when it cannot be started.
CommandOutput run_command(const std::vector<std::string>& argv, int64_t timeout_seconds);

// The path of `name` found on PATH, executable; "" when there is none.
std::string find_on_path(const std::string& name);

// The last non-empty line of a text file ("" when there is none): a crashed child's last words.
std::string last_line(const std::filesystem::path& file);

// The running executable (/proc/self/exe; a binary replaced while it runs, by its path).
std::filesystem::path current_executable();
std::filesystem::path current_executable(std::error_code& ec);

// The program as advice names it ("continue with: ./build/train --resume runs/x"): argv[0] where
// that names this executable from here, else current_executable(); one shell word.
void set_invoked_as(const std::string& argv0);
std::string advised_program();

// The Python that runs the plotting scripts: $TRAIN_PYTHON, else the project's virtualenv
// ($TRAIN_VENV or ~/.cache/train-studies/venv), else python3.
std::string python_executable();

// Runs the build's source tree's scripts/<script> in python_executable(), output to `log_file`;
// returns "" on success, else what went wrong (stopped: the command that draws them).
std::string run_python_script(const std::string& script, const std::vector<std::string>& arguments,
                              const std::filesystem::path& log_file);

}  // namespace training
