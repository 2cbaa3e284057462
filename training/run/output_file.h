// A command's output file (a bench's --output, plan's --json, memory's --snapshot), judged before
// anything is measured: written where it is asked, replacing only an earlier output of its own.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace training {

// Refuses (UserError, one line naming `flag`) a file output that could not be written or would
// replace what it should not: a folder in its place, a folder that is missing or is a file, a block
// device or a socket, a folder that takes no new file, a place inside another command's outputs,
// or an existing file `ours` does not read as `what` (e.g. "a plan written by `train plan`"): an
// earlier output is replaced, nothing else. Character devices and pipes (/dev/null) are written
// into.
void check_output_file(const std::filesystem::path& file, const std::string& flag,
                       const std::function<bool(const std::filesystem::path&)>& ours,
                       const std::string& what);

// Refuses (naming both flags) a file output inside the folder the same command claims (`own_dir`,
// "" for none), which holds only its own files and is emptied when it starts again.
void check_file_outside_own_output(const std::filesystem::path& file, const std::string& flag,
                                   const std::filesystem::path& own_dir,
                                   const std::string& own_flag = "--output-dir");

// Refuses (UserError, naming both flags) an output file that is one of the command's own inputs
// (`bench loader --config X.yaml --output X.yaml` replaced the config): no command writes onto
// what it reads.
void check_not_an_input(const std::filesystem::path& output, const std::string& flag,
                        const std::filesystem::path& input, const std::string& input_flag);

// Whether `file` holds JSON that `accept` takes (an earlier output of a command that writes JSON).
bool json_file_where(const std::filesystem::path& file,
                     const std::function<bool(const nlohmann::json&)>& accept);

}  // namespace training
