// `train memory --card NAME --snapshot FILE`: each setting's step as the card's allocator is
// predicted to hold it, written as PyTorch's memory snapshot (training/cards/allocator_snapshot.h)
// for its viewer: `python -m torch.cuda._memory_viz trace_plot FILE -o FILE.html`.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "training/cards/allocator_snapshot.h"
#include "training/cards/card_prediction.h"
#include "training/config/setting.h"

namespace training {

// The file of `setting`, one of `settings` settings: `file` itself for one; for several, the
// setting's label before the extension (h200.pickle -> h200-bf16+channels_last.pickle).
std::filesystem::path snapshot_file(const std::string& file, const Setting& setting,
                                    size_t settings);

// --snapshot's refusals, before anything runs (UserError naming --snapshot): no card, a path in
// the study's own folder or another command's, a missing folder, a folder, a file that is no
// snapshot train wrote.
void check_snapshot_files(const std::string& file, bool card, const std::vector<Setting>& settings,
                          const std::string& output_dir);

// Writes `snapshot` of `setting`'s prediction `p` to `file` atomically, and says so in the log.
void write_card_snapshot(const std::filesystem::path& file, const AllocatorSnapshot& snapshot,
                         const CardPrediction& p, const std::string& setting);

}  // namespace training
