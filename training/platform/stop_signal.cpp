#include "training/platform/stop_signal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "training/platform/errors.h"

namespace training {
namespace {

std::atomic<bool> requested{false};
std::atomic<int> signals{0};            // stop signals received since the handlers were installed
std::atomic<int> deferring{0};          // live DeferRepeatedStops
std::atomic<int> deferred_signal{0};    // a repeated signal that arrived during one
std::atomic<bool> exit_at_once{false};  // install_exit_on_stop's handlers are the ones installed
std::atomic<int> stop_line_fd{-1};      // also_write_stop_line_to's
std::atomic<bool> too_late{false};      // ignore_stops_from_now's: the outputs are complete
// The stop signal counted last: its number, its sender (-1: none, the kernel's) and when it came.
std::atomic<int> counted_signal{0};
std::atomic<pid_t> counted_sender{-1};
std::atomic<int64_t> counted_at_ns{0};

// Writes `line` (async-signal-safe) to stderr and, where set, the run's log; what write(2) returns
// does not matter to a process ending here.
template <size_t N>
void say_stopped(const char (&line)[N]) {
  [[maybe_unused]] auto written = ::write(STDERR_FILENO, line, N - 1);
  if (const int fd = stop_line_fd.load(); fd >= 0) written = ::write(fd, line, N - 1);
}

// run_on_exit_at_once's command: its strings, and the argv the handler reads (null: none).
std::vector<std::string> exit_command;
std::vector<char*> exit_command_argv;
std::atomic<char* const*> exit_argv{nullptr};

// Runs the exit command and waits for it (fork, execv and waitpid are async-signal-safe).
void run_exit_command() {
  char* const* argv = exit_argv.load();
  if (!argv) return;
  const pid_t child = ::fork();
  if (child == 0) {
    ::execv(argv[0], argv);
    ::_exit(127);
  }
  int status = 0;
  while (child > 0 && ::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
}

// A repeated stop: exit 130 at once with one line (issue 57); atomic writes have finished first.
[[noreturn]] void exit_at_once_on_repeated_stop() {
  run_exit_command();
  say_stopped(
      "[stopped] by a second signal, at once (exit 130); the files written atomically (checkpoint, "
      "metrics, reports) are whole\n");
  ::_exit(kExitStopped);
}

int64_t now_ns() {  // clock_gettime is async-signal-safe
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

// The process that sent it (kill, raise, sigqueue), -1 where the kernel did (a terminal's Ctrl-C,
// whose every press is its own delivery).
pid_t sender_of(const siginfo_t* info) {
  return info != nullptr && info->si_code <= 0 ? info->si_pid : -1;
}

// Whether `signal` is the stop counted last passed on again (kSameStopSeconds): the same signal
// from the same process moments later, as GNU timeout sends it to the process and then to its
// group; else it is counted (and becomes the one counted last).
bool same_stop_again(int signal, pid_t sender) {
  const int64_t now = now_ns();
  if (signals.load() > 0 && signal == counted_signal.load() && sender >= 0 &&
      sender == counted_sender.load() &&
      now - counted_at_ns.load() < static_cast<int64_t>(kSameStopSeconds * 1e9)) {
    return true;
  }
  counted_signal.store(signal);
  counted_sender.store(sender);
  counted_at_ns.store(now);
  return false;
}

extern "C" void on_stop_signal(int signal, siginfo_t* info, void*) {
  if (too_late.load()) return;
  if (same_stop_again(signal, sender_of(info))) return;  // one stop, delivered twice
  requested.store(true);
  if (signals.fetch_add(1) == 0) return;  // the first: a graceful stop
  // A repeated one terminates immediately, except during a durable write: after it.
  if (deferring.load() > 0) {
    deferred_signal.store(signal);
    return;
  }
  exit_at_once_on_repeated_stop();
}

[[noreturn]] void exit_stopped() {
  run_exit_command();
  say_stopped("[stopped] by a signal (exit 130); nothing is half-written\n");
  ::_exit(kExitStopped);
}

extern "C" void exit_on_stop_signal(int signal, siginfo_t*, void*) {
  if (too_late.load()) return;
  if (deferring.load() > 0) {  // an atomic write under way finishes first: no temporary is left
    deferred_signal.store(signal);
    return;
  }
  exit_stopped();
}

// SIGINT, SIGTERM and SIGHUP (not where ignored: nohup) to `handler`, with siginfo.
void handle_stops(void (*handler)(int, siginfo_t*, void*)) {
  struct sigaction action {};
  action.sa_sigaction = handler;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  struct sigaction hangup {};
  if (::sigaction(SIGHUP, nullptr, &hangup) == 0 && hangup.sa_handler == SIG_IGN) return;
  ::sigaction(SIGHUP, &action, nullptr);
}

// While `fd` is set (-1: none), the stop line also goes there; returns the one it replaces.
int also_write_stop_line_to(int fd) {
  return stop_line_fd.exchange(fd);
}

}  // namespace

void install_exit_on_stop() {
  too_late.store(false);
  exit_at_once.store(true);
  handle_stops(exit_on_stop_signal);
}

void run_on_exit_at_once(const std::vector<std::string>& argv) {
  exit_argv.store(nullptr);  // the handler never reads what is being replaced
  exit_command = argv;
  exit_command_argv.clear();
  for (auto& item : exit_command) exit_command_argv.push_back(item.data());
  exit_command_argv.push_back(nullptr);
  if (!argv.empty()) exit_argv.store(exit_command_argv.data());
}

StopLineFile::StopLineFile(const std::filesystem::path& file) {
  // O_NONBLOCK: a FIFO in its place is refused (no reader), not waited on.
  fd_ = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK);
  struct stat status {};
  if (fd_ >= 0 && (::fstat(fd_, &status) != 0 || !S_ISREG(status.st_mode))) {
    ::close(fd_);
    fd_ = -1;
  }
  if (fd_ >= 0) previous_ = also_write_stop_line_to(fd_);
}

StopLineFile::~StopLineFile() {
  if (fd_ < 0) return;
  also_write_stop_line_to(previous_);
  ::close(fd_);
}

void install_stop_handlers() {
  too_late.store(false);
  signals.store(0);
  exit_at_once.store(false);
  handle_stops(on_stop_signal);
}

void ignore_stops_from_now() {
  too_late.store(true);
}

bool stop_requested() {
  return requested.load();
}
void request_stop() {
  requested.store(true);
}
void clear_stop_request() {
  too_late.store(false);
  requested.store(false);
  signals.store(0);
}

DeferRepeatedStops::DeferRepeatedStops() {
  deferring.fetch_add(1);
}

DeferRepeatedStops::~DeferRepeatedStops() {
  if (deferring.fetch_sub(1) != 1) return;
  if (deferred_signal.exchange(0) == 0 || too_late.load()) return;
  if (exit_at_once.load()) exit_stopped();
  exit_at_once_on_repeated_stop();
}

void test_kill_point(const char* point) {
  const char* at = std::getenv("TRAIN_TEST_KILL_AT");
  if (at && std::strcmp(at, point) == 0) std::raise(SIGKILL);
}

void test_stop_point(const std::string& point) {
  const char* at = std::getenv("TRAIN_TEST_STOP_AT");
  if (!at || point != at) return;
  // Under install_exit_on_stop, the signal itself (which exits); else the graceful stop's request.
  if (exit_at_once.load()) {
    std::raise(SIGINT);
  } else if (!too_late.load()) {  // as the handler does
    request_stop();
  }
}

}  // namespace training
