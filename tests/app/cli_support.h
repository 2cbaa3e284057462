// Helpers for the tests that run the `train` executable: run it and collect its output, start it
// in the background, write small configs.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

extern char** environ;

namespace cli {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line; its exit code and output.
inline Result run_shell(const std::string& command) {
  Result result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline Result run_train(const std::string& arguments) {
  return run_shell(std::string(TRAIN_BINARY) + " " + arguments);
}

// Lines of `text`, less the progress lines a Heartbeat prints while a slow part runs ("... (10.0 s
// so far)"): on a loaded machine a refusal after a measurement has one before its one line.
inline int count_lines(const std::string& text) {
  static const std::regex progress(R"(\(\d+\.\d s so far[,)])");
  std::istringstream lines(text);
  int count = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!lines.eof() && !std::regex_search(line, progress)) ++count;  // whole lines only
  }
  return count;
}

// A config for a few seconds of CPU training on synthetic data.
inline fs::path write_tiny_config(const test_support::TempDir& dir, int epochs = 1) {
  std::ofstream(dir / "tiny.yaml") << "model: {arch: resnet18, stem: imagenet}\n"
                                      "data: {source: synthetic, synthetic_train_size: 128, "
                                      "synthetic_test_size: 64}\n"
                                      "training: {device: cpu, epochs: "
                                   << epochs << ", batch_size: 32, log_every_steps: 1}\n";
  return dir / "tiny.yaml";
}

// A finished one-epoch tiny run in dir / name.
inline fs::path finished_tiny_run(const test_support::TempDir& dir,
                                  const std::string& name = "run") {
  const auto run = dir / name;
  const auto r =
      run_train("--config " + write_tiny_config(dir).string() + " --output-dir " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  return run;
}

// `train` with `args`, running in the background with its output in `log`.
class Background {
 public:
  // `own_group`: in a process group of its own (as a shell's job), which stop_as_timeout_does
  // signals.
  Background(std::vector<std::string> args, const fs::path& log, bool own_group = false) {
    args.insert(args.begin(), TRAIN_BINARY);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    if (own_group) {
      posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
      posix_spawnattr_setpgroup(&attributes, 0);
    }
    if (posix_spawn(&pid_, TRAIN_BINARY, &actions, &attributes, argv.data(), environ) != 0) {
      pid_ = -1;
    }
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Background() {
    if (pid_ > 0 && !waited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void signal(int number) const { ::kill(pid_, number); }
  // `number` from another process than this one (a child that sends it): a stop of its own, never
  // the one before passed on again (stop_signal.h).
  void signal_from_another_process(int number) const {
    const pid_t sender = ::fork();
    if (sender == 0) {
      ::kill(pid_, number);
      ::_exit(0);
    }
    ::waitpid(sender, nullptr, 0);
  }
  // As GNU `timeout -s NUMBER` stops it: the process, then its process group (own_group), at once.
  void stop_as_timeout_does(int number) const {
    ::kill(pid_, number);
    ::kill(-pid_, number);
  }
  // The exit code (128 + the signal when a signal ended it).
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    waited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  bool waited_ = false;
};

// Processes whose command line holds `argument`.
inline int processes_running_with(const fs::path& argument) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string cmdline = test_support::read_text(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(argument.string()) != std::string::npos) ++count;
  }
  return count;
}

// Waits (up to `seconds`) until `file` exists; whether it does.
inline bool wait_for_file(const fs::path& file, int seconds = 300) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!fs::exists(file)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// Waits (up to `seconds`) until `file` contains `text`; whether it did.
inline bool wait_for_text(const fs::path& file, const std::string& text, int seconds = 300) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (test_support::read_text(file).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace cli
