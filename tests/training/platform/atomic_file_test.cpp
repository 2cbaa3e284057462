#include "training/platform/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>

#include "test_support.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"

namespace {

namespace fs = std::filesystem;

TEST(AtomicFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  test_support::TempDir dir;
  training::write_file_atomically(dir / "f.txt", "old");
  EXPECT_THROW(training::replace_file_atomically(dir / "f.txt",
                                                 [](const fs::path& temporary) {
                                                   std::ofstream(temporary) << "half";
                                                   throw std::runtime_error("disk full");
                                                 }),
               std::runtime_error);
  EXPECT_EQ(test_support::read_text(dir / "f.txt"), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

// Round 4: a second SIGTERM (the launcher passing a stop on again) during a checkpoint write
// killed the process mid-write, losing the checkpoint. The write finishes first, then the signal
// takes effect: the process ends at once with exit 130, as every stop (issue 57: it died of the
// signal, 143, with no line).
TEST(AtomicFile, ARepeatedStopSignalWaitsForTheWriteToFinish) {
  test_support::TempDir dir;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    training::install_stop_handlers();
    std::raise(SIGTERM);  // the first: a graceful stop, which writes a checkpoint
    training::replace_file_atomically(dir / "checkpoint.pt", [](const fs::path& temporary) {
      std::ofstream(temporary) << "first half,";
      std::raise(SIGTERM);  // the second, mid-write
      std::ofstream(temporary, std::ios::app) << " second half";
    });
    ::_exit(0);  // not reached: the repeated signal ends the process after the write
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == training::kExitStopped) << status;
  EXPECT_EQ(test_support::read_text(dir / "checkpoint.pt"), "first half, second half");
}

}  // namespace
