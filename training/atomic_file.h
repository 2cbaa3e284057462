// Files are replaced whole or not at all: write a temporary beside the target, flush it to
// disk, then rename over the target (rename is atomic within a file system).
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace training {

void write_file_atomically(const std::filesystem::path& target, const std::string& content);

// For writers that need a path (e.g. torch archives): `write` fills the temporary path given to
// it; on success it is renamed over `target`, on failure removed, and the error rethrown.
void replace_file_atomically(const std::filesystem::path& target,
                             const std::function<void(const std::filesystem::path&)>& write);

}  // namespace training
