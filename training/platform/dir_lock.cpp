#include "training/platform/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "training/platform/errors.h"

namespace training {

DirectoryLock::DirectoryLock(const std::filesystem::path& dir) {
  const auto file = dir / ".lock";
  // O_CLOEXEC: child processes (sweep trials, plots) must not inherit and keep the lock.
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw UserError(dir.string() + ": cannot lock the directory (" + std::strerror(errno) + ")");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    const std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "unknown";
    throw UserError(dir.string() + ": in use by another train process (pid " +
                    pid.substr(0, pid.find('\n')) +
                    "); wait for it to finish or stop it, or choose another directory");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, pid.data(), pid.size(), 0);
  }
}

bool locked_by_another_process(const std::filesystem::path& dir) {
  const int fd = ::open((dir / ".lock").c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases it where it was taken
  return held;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace training
