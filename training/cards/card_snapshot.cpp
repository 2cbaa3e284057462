#include "training/cards/card_snapshot.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <iterator>

#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/platform/stop_signal.h"
#include "training/run/output_file.h"

namespace training {

namespace fs = std::filesystem;

fs::path snapshot_file(const std::string& file, const Setting& setting, size_t settings) {
  const fs::path path(file);
  if (settings <= 1) return path;
  return path.parent_path() /
         (path.stem().string() + "-" + setting.label() + path.extension().string());
}

namespace {

// A snapshot this program wrote: a pickle (the PROTO opcode, 0x80, first) holding the writer's
// mark (snapshot_pickle's "written_by"). Another pickle may be the user's own data.
bool is_our_snapshot(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return !text.empty() && static_cast<unsigned char>(text[0]) == 0x80 &&
         text.find(kSnapshotWriter) != std::string::npos;
}

}  // namespace

void check_snapshot_files(const std::string& file, bool card, const std::vector<Setting>& settings,
                          const std::string& output_dir) {
  if (!card) {
    throw UserError(
        "--snapshot: draws the step predicted on a card; give the card with --card (e.g. --card "
        "H200)");
  }
  if (file.empty()) throw UserError("--snapshot: expected a file to write, e.g. h200.pickle");
  check_file_outside_own_output(file, "--snapshot", output_dir);
  // A folder in FILE's place is refused however many settings there are (with several, the files
  // were written beside it, named after it).
  std::error_code error;
  if (fs::is_directory(file, error)) {
    throw UserError("--snapshot: " + file + " is a folder; give a file name");
  }
  // With several settings each file is named after FILE: beside a device (/dev/null) none is.
  if (settings.size() > 1 && fs::exists(file, error) && !fs::is_regular_file(file, error)) {
    throw UserError("--snapshot: " + file + " is not a file, and with " +
                    std::to_string(settings.size()) +
                    " settings each is written beside it under its own name; give a file name");
  }
  for (const Setting& setting : settings) {
    check_output_file(snapshot_file(file, setting, settings.size()), "--snapshot", is_our_snapshot,
                      "a snapshot train wrote");
  }
}

void write_card_snapshot(const fs::path& file, const AllocatorSnapshot& snapshot,
                         const CardPrediction& p, const std::string& setting) {
  const std::string pickled = snapshot_pickle(snapshot, "predicted for " + p.card.name);
  replace_file_atomically(file, [&](const fs::path& temporary) {
    write_whole_file(temporary, pickled, file);
    test_stop_point("card snapshot");  // tests: a stop while it is written
  });
  fs::path page = file;
  page.replace_extension(".html");
  spdlog::info(
      "{} on {}: the allocator's predicted segments ({} reserved: the reserved peak, in {}) and "
      "its {} events in {}; view it with `{} -m torch.cuda._memory_viz trace_plot {} -o {}` or "
      "at https://pytorch.org/memory_viz",
      setting, p.card.name, format_bytes(snapshot.reserved), snapshot.peak_phase,
      snapshot.trace.size(), file.string(), shell_word(python_executable()),
      shell_word(file.string()), shell_word(page.string()));
  if (snapshot.left_out > 0) {
    spdlog::info(
        "{} on {}: the snapshot ends at the reserved peak; the {} events after it (where the "
        "allocator returned cached segments) are left out",
        setting, p.card.name, snapshot.left_out);
  }
}

}  // namespace training
