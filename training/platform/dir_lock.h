// An exclusive lock on an output directory (a run or a sweep), so that two processes never write
// the same directory: `flock` on <dir>/.lock, held for the life of the object (in practice the
// process's), released by the operating system when the process dies, so kill -9 never leaves a
// directory locked. The holder's pid is written into the file, for the message the next process
// gets. `train report` takes it when it is free (run_report.h) and writes without it otherwise.
#pragma once

#include <filesystem>

namespace training {

// Whether another process holds `dir`'s lock now (a probe: nothing is created or written).
bool locked_by_another_process(const std::filesystem::path& dir);

class DirectoryLock {
 public:
  // Takes the lock on existing directory `dir`; throws UserError naming the holder's pid when
  // another process holds it.
  explicit DirectoryLock(const std::filesystem::path& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace training
