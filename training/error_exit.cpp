#include "training/error_exit.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <filesystem>

#include "data/split.h"
#include "training/platform/errors.h"

namespace training {

ErrorExit error_exit(const std::exception& error) {
  if (const auto* e = dynamic_cast<const PeerError*>(&error)) return {e->code(), e->what()};
  if (dynamic_cast<const OutOfMemory*>(&error)) return {kExitOutOfMemory, error.what()};
  if (dynamic_cast<const DistributedError*>(&error)) return {kExitDistributed, error.what()};
  if (dynamic_cast<const CannotWrite*>(&error)) return {kExitCannotWrite, error.what()};
  if (const auto* e = dynamic_cast<const std::filesystem::filesystem_error*>(&error)) {
    // A path that cannot be used (a loop of symbolic links, a name too long, a folder where a
    // file is expected): the user's to fix, unless the disk is full.
    const int code = e->code().value();
    const bool full = code == ENOSPC || code == EDQUOT || code == EFBIG || code == EIO;
    return {full ? kExitCannotWrite : kExitBadInput,
            (e->path1().empty() ? std::string("filesystem") : e->path1().string()) + ": " +
                e->code().message()};
  }
  if (dynamic_cast<const data::DataError*>(&error) || dynamic_cast<const UserError*>(&error)) {
    return {kExitBadInput, error.what()};
  }
  if (const auto* e = dynamic_cast<const c10::Error*>(&error)) {
    return {kExitInternalError, "LibTorch error: " + first_line(e->what_without_backtrace())};
  }
  return {kExitInternalError, "internal error: " + first_line(error.what())};
}

}  // namespace training
