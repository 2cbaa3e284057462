#include "training/run/output_file.h"

#include <sys/stat.h>

#include <fstream>

#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"
#include "training/run/output_dir.h"

namespace training {

namespace fs = std::filesystem;

void check_output_file(const fs::path& file, const std::string& flag,
                       const std::function<bool(const fs::path&)>& ours, const std::string& what) {
  if (file.empty()) throw UserError(flag + ": expected a file to write");
  std::error_code error;
  if (fs::is_directory(file, error)) {
    throw UserError(flag + ": " + file.string() + " is a folder; give a file name");
  }
  if (file.string().back() == '/') {
    throw UserError(flag + ": " + file.string() + " ends in '/'; give a file name");
  }
  struct stat held {};  // links followed, as the write follows them
  const bool exists = ::stat(file.c_str(), &held) == 0;
  if (exists && (S_ISBLK(held.st_mode) || S_ISSOCK(held.st_mode))) {
    throw UserError(flag + ": " + file.string() + ": " +
                    (S_ISBLK(held.st_mode) ? "a block device" : "a socket") +
                    ", not a file to write");
  }
  // A device or a pipe (/dev/null, /dev/stdout) is written into, where it is.
  if (exists && !S_ISREG(held.st_mode)) return;
  const fs::path target = link_destination(file, error);  // where the write lands
  const fs::path folder = target.parent_path();
  if (!exists && !folder.empty() && !fs::is_directory(folder, error)) {
    throw UserError(flag + ": " + folder.string() +
                    (target == file ? "" : " (where the link " + file.string() + " points)") +
                    (fs::exists(folder, error) ? " is not a folder" : " does not exist") +
                    "; give a path in an existing folder");
  }
  check_file_outside_outputs(target, flag);  // another command's folder first: it says most
  if (exists && !ours(file)) {
    throw UserError(flag + ": " + file.string() + " exists and is not " + what +
                    " (an earlier one is replaced, nothing else); give another path");
  }
}

void check_file_outside_own_output(const fs::path& file, const std::string& flag,
                                   const fs::path& own_dir, const std::string& own_flag) {
  if (own_dir.empty() || file.empty()) return;
  std::error_code ec;
  const fs::path own = fs::weakly_canonical(fs::absolute(own_dir, ec), ec);
  if (ec) return;
  for (fs::path at = fs::weakly_canonical(fs::absolute(file, ec), ec);
       !ec && at.has_relative_path(); at = at.parent_path()) {
    if (at.parent_path() != own) continue;
    throw UserError(flag + ": " + file.string() + " is inside " + own_dir.string() +
                    ", the folder " + own_flag + " gives this command; give a path outside it");
  }
}

void check_not_an_input(const fs::path& output, const std::string& flag, const fs::path& input,
                        const std::string& input_flag) {
  std::error_code ec;
  const bool same = fs::exists(output, ec) && fs::exists(input, ec)
                        ? fs::equivalent(output, input, ec)
                        : fs::weakly_canonical(output, ec) == fs::weakly_canonical(input, ec);
  if (!same) return;
  throw UserError(flag + ": " + output.string() + " is the " + input_flag + " file " +
                  input.string() + ", which this command reads; give another path for " + flag);
}

bool json_file_where(const fs::path& file,
                     const std::function<bool(const nlohmann::json&)>& accept) {
  std::ifstream in(file);
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return !json.is_discarded() && accept(json);
}

}  // namespace training
