#include "training/platform/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"

namespace training {

namespace fs = std::filesystem;

namespace {

fs::path temporary_for(const fs::path& target) {
  return target.parent_path() /
         ("." + target.filename().string() + ".tmp" + std::to_string(::getpid()));
}

// SIGPIPE ignored while one lives (a pipe's write meets EPIPE instead), restored as it ends.
class SigpipeIgnored {
 public:
  SigpipeIgnored() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &previous_);
  }
  ~SigpipeIgnored() { ::sigaction(SIGPIPE, &previous_, nullptr); }
  SigpipeIgnored(const SigpipeIgnored&) = delete;
  SigpipeIgnored& operator=(const SigpipeIgnored&) = delete;

 private:
  struct sigaction previous_ {};
};

}  // namespace

std::string read_whole_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw UserError(file.string() + ": not a file");
  std::ifstream in(file, std::ios::binary);
  std::string bytes;
  if (in) bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad()) {
    throw UserError(file.string() + ": cannot be read (" + std::strerror(errno) + ")");
  }
  return bytes;
}

void throw_write_error(const fs::path& path, int error) {
  const std::string reason = std::strerror(error);
  if (error == ENOSPC || error == EDQUOT || error == EFBIG || error == EIO) {
    throw CannotWrite(path.string() + ": could not write (" + reason +
                      "); what was written before is intact");
  }
  throw UserError(path.string() + ": cannot write (" + reason + ")");
}

bool is_temporary_of(const fs::path& file, const std::string& target_name) {
  const std::string prefix = "." + target_name + ".tmp";
  return file.filename().string().rfind(prefix, 0) == 0;
}

fs::path link_destination(const fs::path& target, std::error_code& error) {
  error.clear();
  fs::path file = target;
  std::error_code absent;  // a path that is not there is no link, and no error
  for (int hops = 0; fs::is_symlink(fs::symlink_status(file, absent)); ++hops) {
    const fs::path to = fs::read_symlink(file, error);
    if (error) return file;
    if (hops == 40) {
      error = std::make_error_code(std::errc::too_many_symbolic_link_levels);
      return file;
    }
    file = to.is_absolute() ? to : file.parent_path() / to;
  }
  return file;
}

void replace_file_atomically(const fs::path& target,
                             const std::function<void(const fs::path&)>& write) {
  // A device or a pipe, or a link to one (/dev/stdout is a link to /proc/self/fd/1), is written
  // into, never replaced by a file renamed over it (/dev/null; /dev/full says it is full): only a
  // file can be replaced whole. A block device or a socket is no output. A pipe whose reader has
  // gone is a write error (EPIPE), not the end of the process (SIGPIPE, ignored while it writes).
  struct stat held {};
  if (::stat(target.c_str(), &held) == 0 && !S_ISREG(held.st_mode) && !S_ISDIR(held.st_mode)) {
    if (S_ISBLK(held.st_mode) || S_ISSOCK(held.st_mode)) {
      throw UserError(target.string() + ": " +
                      (S_ISBLK(held.st_mode) ? "a block device" : "a socket") +
                      ", not a file to write");
    }
    const SigpipeIgnored ignored;
    write(target);
    return;
  }
  // A symbolic link is followed: the file it names is replaced, the link kept.
  std::error_code linked;
  const fs::path file = link_destination(target, linked);
  if (linked) throw_write_error(target, linked.value());
  const fs::path temporary = temporary_for(file);
  // A repeated stop signal waits for the write: it never leaves the new file half-way.
  const DeferRepeatedStops defer;
  try {
    write(temporary);
    const int fd = ::open(temporary.c_str(), O_RDONLY);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int error = errno;
      if (fd >= 0) ::close(fd);
      throw_write_error(target, error);
    }
    ::close(fd);
    std::error_code ec;
    fs::rename(temporary, file, ec);
    if (ec) throw_write_error(target, ec.value());
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
}

void write_whole_file(const fs::path& file, const std::string& content,
                      const fs::path& reported_as) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_write_error(reported_as, errno);
  const char* data = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      const int error = written < 0 ? errno : ENOSPC;
      ::close(fd);
      throw_write_error(reported_as, error);
    }
    data += written;
    left -= static_cast<size_t>(written);
  }
  if (::close(fd) != 0) throw_write_error(reported_as, errno);
}

void write_file_atomically(const fs::path& target, const std::string& content) {
  replace_file_atomically(
      target, [&](const fs::path& temporary) { write_whole_file(temporary, content, target); });
}

}  // namespace training
