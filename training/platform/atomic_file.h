// Files are replaced whole or not at all: write a temporary beside the target, flush it to
// disk, then rename over the target (rename is atomic within a file system). And read whole.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace training {

// Writes `content` to `target` atomically; throws CannotWrite (a full disk, quota or failing
// device) or UserError naming the path, the temporary removed and the old file untouched.
void write_file_atomically(const std::filesystem::path& target, const std::string& content);

// Writes `content` to `file` (not atomically: for the temporaries of replace_file_atomically);
// errors as write_file_atomically's, naming `reported_as`.
void write_whole_file(const std::filesystem::path& file, const std::string& content,
                      const std::filesystem::path& reported_as);

// The file a write to `target` replaces: symbolic links followed as a shell's `>` follows them (a
// link to nothing gives the file it names); `error` set where a link cannot be read or they loop.
std::filesystem::path link_destination(const std::filesystem::path& target, std::error_code& error);

// For writers that need a path (torch archives): `write` fills a temporary, renamed over `target`
// on success, removed on failure. A character device or FIFO at `target` (/dev/null, a pipe) is
// written directly, never replaced; a block device or a socket is refused (UserError).
void replace_file_atomically(const std::filesystem::path& target,
                             const std::function<void(const std::filesystem::path&)>& write);

// The whole of `file`'s bytes. Throws UserError "<file>: not a file" for a folder, FIFO, device
// or nothing, and "<file>: cannot be read (<reason>)" when opening or reading fails.
std::string read_whole_file(const std::filesystem::path& file);

// The temporaries these functions write beside `target` (".<name>.tmp<pid>").
bool is_temporary_of(const std::filesystem::path& file, const std::string& target_name);

// Throws the error for `path`'s failed write with errno `error` (CannotWrite or UserError).
[[noreturn]] void throw_write_error(const std::filesystem::path& path, int error);

}  // namespace training
