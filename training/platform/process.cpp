#include "training/platform/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "build_config.h"
#include "training/platform/errors.h"
#include "training/platform/heartbeat.h"
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

bool ProcessOutcome::ended_by_stop() const {
  return exit_code == kExitStopped || (!timed_out && (signal == SIGINT || signal == SIGTERM));
}

namespace {

// fork + exec, the child killed when this process dies (PR_SET_PDEATHSIG) and making only
// async-signal-safe calls before exec; an exec failure's errno comes back through a pipe.
pid_t start_child(std::vector<char*>& args, const fs::path& log_file, char** env = environ) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw UserError(std::string(args[0]) + ": cannot start (" + std::strerror(errno) + ")");
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    int error = 0;
    const int log = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0 || ::dup2(log, STDOUT_FILENO) < 0 || ::dup2(log, STDERR_FILENO) < 0 ||
        ::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
      error = errno;
    } else if (::getppid() != parent) {
      ::_exit(127);  // the parent died before the request took effect
    } else {
      ::execve(args[0], args.data(), env);
      error = errno;
    }
    ssize_t written = ::write(pipe_fds[1], &error, sizeof error);
    (void)written;
    ::_exit(127);
  }
  const int fork_error = errno;
  ::close(pipe_fds[1]);
  int child_error = 0;
  const ssize_t got = pid > 0 ? ::read(pipe_fds[0], &child_error, sizeof child_error) : 0;
  ::close(pipe_fds[0]);
  if (pid < 0 || got == static_cast<ssize_t>(sizeof child_error)) {
    if (pid > 0) ::waitpid(pid, nullptr, 0);
    throw UserError(std::string(args[0]) + ": cannot start (" +
                    std::strerror(pid < 0 ? fork_error : child_error) + ")");
  }
  return pid;
}

// This process's environment with `extra` set ("NAME=value" entries replace their names').
std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  std::vector<std::string> entries;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('=') + 1);
    bool replaced = false;
    for (const auto& set : extra) replaced = replaced || set.rfind(name, 0) == 0;
    if (!replaced) entries.push_back(entry);
  }
  entries.insert(entries.end(), extra.begin(), extra.end());
  return entries;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Waits for `pid`, killing it after `timeout_seconds`; with `pass_stops`, a stop of this process
// is passed on to it as SIGTERM (SIGKILL 10 s later).
ProcessOutcome wait_for_child(pid_t pid, int64_t timeout_seconds, bool pass_stops) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto deadline = start + std::chrono::seconds(timeout_seconds);
  ProcessOutcome outcome;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (pass_stops && stop_requested() && !outcome.stopped) {
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

std::string& invoked_as() {
  static std::string argv0;
  return argv0;
}

}  // namespace

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate.string();
    }
  }
  return "";
}

CommandOutput run_command(const std::vector<std::string>& argv, int64_t timeout_seconds) {
  std::vector<std::string> copies = argv;
  const std::string found = find_on_path(argv.at(0));
  if (found.empty()) throw UserError(argv[0] + ": not found on PATH or not executable");
  copies[0] = found;
  char temp[] = "/tmp/train-command-XXXXXX";
  const int fd = ::mkstemp(temp);
  if (fd < 0) throw UserError(std::string("cannot make a temporary file: ") + strerror(errno));
  ::close(fd);
  std::vector<char*> args = pointers(copies);
  CommandOutput result{wait_for_child(start_child(args, temp), timeout_seconds, false).exit_code,
                       ""};
  std::ifstream in(temp);
  result.output.assign(std::istreambuf_iterator<char>(in), {});
  if (result.output.size() > (1 << 20)) result.output.resize(1 << 20);
  ::unlink(temp);
  return result;
}

ProcessOutcome run_process(const std::vector<std::string>& argv, const fs::path& log_file,
                           int64_t timeout_seconds, const std::vector<std::string>& environment) {
  std::vector<std::string> copies = argv;
  std::vector<char*> args = pointers(copies);
  std::vector<std::string> env_entries = environment_with(environment);
  std::vector<char*> env = pointers(env_entries);
  return wait_for_child(start_child(args, log_file, env.data()), timeout_seconds, true);
}

std::string last_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

fs::path current_executable(std::error_code& ec) {
  std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  // A binary replaced while it runs (rebuilt) reads "PATH (deleted)": PATH holds its successor.
  const std::string deleted = " (deleted)";
  if (self.size() > deleted.size() &&
      self.compare(self.size() - deleted.size(), deleted.size(), deleted) == 0) {
    self.resize(self.size() - deleted.size());
  }
  return self;
}

fs::path current_executable() {
  std::error_code ec;
  const fs::path self = current_executable(ec);
  if (ec) throw fs::filesystem_error("/proc/self/exe", ec);
  return self;
}

void set_invoked_as(const std::string& argv0) {
  invoked_as() = argv0;
}

std::string advised_program() {
  std::error_code ec;
  const fs::path self = current_executable(ec);
  const std::string& argv0 = invoked_as();
  // A bare name is looked up on PATH, as a shell would; a path is read from this folder.
  const std::string found = argv0.empty() ? std::string() : find_on_path(argv0);
  if (!found.empty() && !ec && fs::equivalent(found, self, ec) && !ec) return shell_word(argv0);
  return shell_word(ec ? std::string("train") : self.string());
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
  // A stop (a command that stops gracefully) ends the script or keeps it from starting. The advice
  // names the Python that runs it here (python3 on PATH may lack matplotlib).
  const std::string python = python_executable();
  std::string again = shell_word(python) + " " + shell_word(path.string());
  for (const auto& argument : arguments) again += " " + shell_word(argument);
  const std::string stopped =
      script + ": not drawn, stopped by a signal (" + again + " draws them)";
  if (stop_requested()) return stopped;
  std::vector<std::string> argv = {python, path.string()};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  // exec needs a path: resolve a bare "python3" through PATH with /usr/bin/env.
  if (argv[0].find('/') == std::string::npos) argv.insert(argv.begin(), "/usr/bin/env");
  std::error_code ignored;
  fs::remove(log_file, ignored);
  // The log's folder is checked first, so that a read-only folder is not blamed on Python.
  if (!std::ofstream(log_file, std::ios::app)) {
    return log_file.string() + ": cannot write (" + std::strerror(errno) + ")";
  }
  ProcessOutcome outcome;
  try {
    Heartbeat beat("plots: " + script + " drawing into " + log_file.parent_path().string());
    outcome = run_process(argv, log_file, 600);
  } catch (const UserError& e) {  // the plots are optional: a missing Python is said, not fatal
    return std::string("Python ") + e.what() + " (set TRAIN_PYTHON, or run " +
           shell_word(TRAIN_SCRIPTS_DIR "/setup.sh") + ")";
  }
  if (outcome.stopped) return stopped;
  if (outcome.exit_code == 0) return "";
  const std::string last = last_line(log_file);
  return script + ": " + outcome.describe() + (last.empty() ? "" : " (" + last + ")");
}

}  // namespace training
