#include "training/platform/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "build_config.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"

extern char** environ;

namespace training {

namespace fs = std::filesystem;

std::string ProcessOutcome::describe() const {
  if (timed_out) return "timed out after " + std::to_string(static_cast<int64_t>(seconds)) + " s";
  if (signal != 0) {
    return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  }
  return "exit code " + std::to_string(exit_code);
}

ProcessOutcome run_process(const std::vector<std::string>& argv, const fs::path& log_file,
                           int64_t timeout_seconds) {
  std::vector<char*> args;
  std::vector<std::string> copies = argv;
  for (auto& arg : copies) args.push_back(arg.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_file.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) throw UserError(argv[0] + ": cannot start (" + std::strerror(error) + ")");

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto deadline = start + std::chrono::seconds(timeout_seconds);
  ProcessOutcome outcome;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (stop_requested() && !outcome.stopped) {
      ::kill(pid, SIGTERM);
      outcome.stopped = true;
      deadline = Clock::now() + std::chrono::seconds(10);  // then it is killed
    }
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      outcome.timed_out = !outcome.stopped;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
  return outcome;
}

std::string last_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

fs::path current_executable() {
  return fs::read_symlink("/proc/self/exe");
}

std::string python_executable() {
  if (const char* python = std::getenv("TRAIN_PYTHON")) return python;
  const char* venv = std::getenv("TRAIN_VENV");
  const char* home = std::getenv("HOME");
  const fs::path candidate =
      venv ? fs::path(venv) / "bin/python"
           : fs::path(home ? home : "/") / ".cache/train-studies/venv/bin/python";
  return fs::exists(candidate) ? candidate.string() : "python3";
}

std::string run_python_script(const std::string& script, const std::vector<std::string>& arguments,
                              const fs::path& log_file) {
  const fs::path path = fs::path(TRAIN_SCRIPTS_DIR) / script;
  if (!fs::exists(path)) return path.string() + " not found";
  std::vector<std::string> argv = {python_executable(), path.string()};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  // posix_spawn needs a path: resolve a bare "python3" through PATH with /usr/bin/env.
  if (argv[0].find('/') == std::string::npos) argv.insert(argv.begin(), "/usr/bin/env");
  std::error_code ignored;
  fs::remove(log_file, ignored);
  const auto outcome = run_process(argv, log_file, 600);
  if (outcome.exit_code == 0) return "";
  const std::string last = last_line(log_file);
  return script + ": " + outcome.describe() + (last.empty() ? "" : " (" + last + ")");
}

}  // namespace training
