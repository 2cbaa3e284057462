#include "training/platform/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

#include "training/platform/errors.h"

namespace training {
namespace {

std::atomic<bool> requested{false};

extern "C" void on_stop_signal(int signal) {
  requested.store(true);
  std::signal(signal, SIG_DFL);  // the next one terminates immediately
}

extern "C" void exit_on_stop_signal(int) {
  ::_exit(kExitStopped);
}

}  // namespace

void install_exit_on_stop() {
  std::signal(SIGINT, exit_on_stop_signal);
  std::signal(SIGTERM, exit_on_stop_signal);
}

void install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_requested() {
  return requested.load();
}
void request_stop() {
  requested.store(true);
}
void clear_stop_request() {
  requested.store(false);
}

}  // namespace training
