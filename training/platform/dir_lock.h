// An exclusive lock on an output directory: `flock` on <dir>/.lock for the object's life, released
// by the kernel when the process dies (kill -9 too), with the holder's pid in the file for the next
// one's message. `train report` takes it when it is free (run_report.h), writes without it else.
#pragma once

#include <filesystem>

namespace training {

// Whether another process holds `dir`'s lock now (a probe: nothing is created or written).
bool locked_by_another_process(const std::filesystem::path& dir);

class DirectoryLock {
 public:
  // Locks existing directory `dir`; UserError naming the holder's pid where another holds it.
  explicit DirectoryLock(const std::filesystem::path& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace training
