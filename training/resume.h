// What `train` starts from: the run --resume names, and the effective config (--config with its
// overrides, or a resumed run's stored config with its hand edits and the flags').
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "training/config/config.h"
#include "training/config/decisions.h"
#include "training/loop/trainer.h"
#include "training/parts/memory_format.h"
#include "training/platform/stop_signal.h"
#include "training/run/checkpoint_io.h"
#include "training/train_request.h"

namespace training {

// What --resume names: a checkpoint to continue from, in a run directory. A run without one starts
// again from its config only where it recorded no epoch: metrics are never trained over.
struct ResumeTarget {
  std::filesystem::path run_dir;     // empty when not resuming
  std::filesystem::path checkpoint;  // empty when restarting a run that has none
};

ResumeTarget resume_target(const std::string& resume);

// A resumed run continues in its own folder: refuses --output-dir with --resume (UserError: drop
// it, or train a new run from its config). effective_config refuses output.dir or output.name
// other than the run's recorded ones, wherever they were set.
void refuse_another_folder(const TrainRequest& request, const ResumeTarget& resume);

// Rank 0's ResumedRunLog (run_dir.h) of a resumed run; none for a new run or while another
// process holds the run (refused at its lock).
std::unique_ptr<ResumedRunLog> resumed_run_log(const ResumeTarget& resume);

// The config as asked: --config and the overrides, or a resumed checkpoint's with config.yaml's
// hand edits (as --set) and the flags, or a run without checkpoint's config.yaml; its decisions go
// to `recorded`.
Config effective_config(const TrainRequest& request, const ResumeTarget& resume,
                        Decisions& recorded);

// A resumed run at `position` has done its training.epochs or training.max_steps.
bool nothing_left_to_train(const TrainState& position, const Config& asked);

// A resumed run with nothing left to train keeps its recorded decisions (none measured again for a
// batch it will never train at; its files not rewritten). Returns the layout as decided.
MemoryFormatChoice kept_decisions(const Config& asked, const Decisions& decisions);

// Loads the resumed checkpoint into `trainer` (out of memory: exit 3) before anything but the log
// is written, so a refused resume leaves the run's files as they were; says a restart without one,
// and `trained` (nothing left to train) once loaded.
void load_resumed(const ResumeTarget& resume, const Config& config, const torch::Device& device,
                  Trainer& trainer, bool trained);

}  // namespace training
