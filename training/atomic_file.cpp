#include "training/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <system_error>

#include "training/errors.h"

namespace training {

namespace fs = std::filesystem;

namespace {

void flush_to_disk(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void replace_file_atomically(const fs::path& target,
                             const std::function<void(const fs::path&)>& write) {
  const fs::path temporary = target.parent_path() / ("." + target.filename().string() + ".tmp" +
                                                     std::to_string(::getpid()));
  try {
    write(temporary);
    flush_to_disk(temporary);
    fs::rename(temporary, target);
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
}

void write_file_atomically(const fs::path& target, const std::string& content) {
  replace_file_atomically(target, [&](const fs::path& temporary) {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    if (!out) throw UserError(target.string() + ": cannot write (disk full or no permission?)");
  });
}

}  // namespace training
