// Child processes: the Python that runs the plotting scripts, and what a stop advises.
#include "training/platform/process.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>

#include "test_support.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"

namespace {

namespace fs = std::filesystem;

// Sets (or unsets) an environment variable for one scope, restoring what it was.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedVariable() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// What a stop before the plots advises: the command that draws them.
std::string stopped_advice(const fs::path& log) {
  training::request_stop();
  const std::string advice = training::run_python_script("plot_sweep.py", {"out dir"}, log);
  training::clear_stop_request();
  return advice;
}

// A stopped sweep advised "python3 .../plot_sweep.py DIR draws them", where python3 on PATH need
// not have matplotlib: it names the Python train runs the script in (TRAIN_PYTHON, or the
// virtualenv it found), as one shell word.
TEST(Process, AStoppedPlotAdvisesThePythonThatRunsIt) {
  test_support::TempDir dir;
  {
    const ScopedVariable python("TRAIN_PYTHON", "/opt/my python/bin/python3.12");
    EXPECT_EQ(training::python_executable(), "/opt/my python/bin/python3.12");
    const std::string advice = stopped_advice(dir / "plots.log");
    EXPECT_EQ(advice.rfind("plot_sweep.py: not drawn, stopped by a signal ('/opt/my "
                           "python/bin/python3.12' /",
                           0),
              0u)
        << advice;
    EXPECT_NE(advice.find("/plot_sweep.py 'out dir' draws them)"), std::string::npos) << advice;
  }
  // Without TRAIN_PYTHON: the virtualenv's Python, where it exists.
  fs::create_directories(dir / "venv" / "bin");
  std::ofstream(dir / "venv" / "bin" / "python") << "";
  const ScopedVariable unset("TRAIN_PYTHON", std::nullopt);
  const ScopedVariable venv("TRAIN_VENV", (dir / "venv").string());
  const std::string python = (dir / "venv" / "bin" / "python").string();
  EXPECT_EQ(training::python_executable(), python);
  const std::string advice = stopped_advice(dir / "plots.log");
  EXPECT_NE(advice.find("(" + training::shell_word(python) + " /"), std::string::npos) << advice;
  EXPECT_EQ(advice.find("python3 "), std::string::npos) << advice;
}

// Issue 51, a ninth pass: a binary replaced while it ran (a rebuild: a new file renamed over it)
// advised "'/path/train (deleted)' --resume run", a path that does not exist. Here this test's own
// binary is replaced by an identical copy; the advice names it as it was run.
TEST(Process, AdviceNamesAProgramReplacedWhileItRunsByItsPath) {
  const fs::path self = training::current_executable();
  fs::copy_file(self, self.string() + ".copy", fs::copy_options::overwrite_existing);
  fs::rename(self.string() + ".copy", self);
  ASSERT_NE(fs::read_symlink("/proc/self/exe").string().find(" (deleted)"), std::string::npos);
  training::set_invoked_as(self.string());
  EXPECT_EQ(training::advised_program(), training::shell_word(self.string()));
  training::set_invoked_as("");
}

}  // namespace
