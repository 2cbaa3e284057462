#include "app/process.h"

#include <c10/util/Logging.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>

#include "training/cards/alloc_conf.h"
#include "training/error_exit.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/stop_signal.h"
#include "training/run/run_dir.h"

namespace app {

namespace {

using training::kExitBadInput;
using training::one_line;

}  // namespace

int guarded(const std::function<int()>& action) {
  // The error's line ends the command, on the terminal and in the train.log of a run folder that
  // closed as it left (run_dir.h).
  auto error = [](const std::string& line) {
    training::log_final_error(spdlog::level::err, one_line(line));
  };
  try {
    return action();
  } catch (const std::exception& e) {
    const training::ErrorExit exit = training::error_exit(e);
    error(exit.line);
    return exit.code;
  }
}

void set_up_process() {
  training::configure_console_logging();
  // LibTorch's own log lines (c10d's connection retries with backtraces, ...) stay out of the
  // terminal unless asked for with TORCH_CPP_LOG_LEVEL; our one-line errors say what happened.
  if (!std::getenv("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = c10::GLOG_FATAL;
  // With a file-size limit (ulimit -f), writing past it fails with EFBIG and exit code 5 instead
  // of killing the process in the middle of a write.
  std::signal(SIGXFSZ, SIG_IGN);
  // Installed before any tensor exists, so CPU memory accounting sees every allocation.
  training::TrackingCpuAllocator::instance();
}

}  // namespace app

namespace {

// NAME's value in the loader's copy of the environment; nullptr when it is not set.
const char* environment_value(char** environment, const char* name) {
  const size_t length = std::strlen(name);
  for (char** variable = environment; variable && *variable; ++variable) {
    if (std::strncmp(*variable, name, length) == 0 && (*variable)[length] == '=') {
      return *variable + length + 1;
    }
  }
  return nullptr;
}

}  // namespace

// A stop before a command can stop gracefully exits with 130 from here on: the dynamic loader
// runs .preinit_array before any library's initialisers (LibTorch's take a noticeable time), so
// only the mapping and relocation before it are left to the default action (143 for SIGTERM). A
// PYTORCH_CUDA_ALLOC_CONF that LibTorch would abort on while loading is refused here, in one line.
extern "C" void train_preinit(int, char**, char** environment) {
  training::install_exit_on_stop();
  // From the loader's own copy of the environment: libc's (getenv) is not set up yet. The one
  // LibTorch reads: PYTORCH_CUDA_ALLOC_CONF when set, empty too, else PYTORCH_ALLOC_CONF.
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    const char* value = environment_value(environment, name);
    if (!value) continue;
    if (training::for_each_alloc_conf_item(value, [](std::string_view, std::string_view) {}))
      return;
    auto put = [](const char* text, size_t length) { return ::write(STDERR_FILENO, text, length); };
    auto say = [&](const char* text) { return put(text, std::strlen(text)); };
    const size_t length = std::strlen(value);
    const size_t shown = training::utf8_prefix(value, length, 200);  // a long value cut short
    (void)(say("[error] ") < 0 || say(name) < 0 ||
           say(": expected key:value items separated by single commas (e.g. "
               "expandable_segments:True,max_split_size_mb:128), got '") < 0 ||
           put(value, shown) < 0 || say(length > shown ? "...'" : "'") < 0 ||
           say(" (LibTorch reads it while loading and aborts on malformed values)\n") < 0);
    std::_Exit(training::kExitBadInput);
  }
}
__attribute__((section(".preinit_array"),
               used)) static void (*const kPreinit)(int, char**, char**) = train_preinit;
