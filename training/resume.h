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

// What --resume names: a checkpoint to continue from, in a run directory. A run directory that
// holds a run but no checkpoint (nothing at all at its checkpoint.pt) starts again from its
// stored config only when it recorded no epoch (it stopped before its first checkpoint); a run
// that recorded epochs is refused, so that its metrics and report are never trained over.
struct ResumeTarget {
  std::filesystem::path run_dir;     // empty when not resuming
  std::filesystem::path checkpoint;  // empty when restarting a run that has none
};

ResumeTarget resume_target(const std::string& resume);

// A resumed run's train.log, where the line of a stop or of an error also goes before its
// RunDirectory opens it (run_dir.h's ResumedRunLog): its checkpoint read, the data, the checks
// and the measurements come first. Rank 0's, which writes it; none while another process holds
// the run (the resume is refused at its lock) or for a new run (its folder is made once it has
// measured).
std::unique_ptr<ResumedRunLog> resumed_run_log(const ResumeTarget& resume);

// The config this run trains with, as asked: --config and the overrides; a resumed run's
// checkpoint's stored config with config.yaml's hand edits (taken as --set would take them) and
// the flags; or a run without checkpoint's config.yaml. A resumed checkpoint's decisions go to
// `recorded` (its 'decisions' entry).
Config effective_config(const TrainRequest& request, const ResumeTarget& resume,
                        Decisions& recorded);

// Whether a resumed run at `position` (its checkpoint's) has nothing left to train with `asked`:
// its training.epochs, or training.max_steps, done.
bool nothing_left_to_train(const TrainState& position, const Config& asked);

// A resumed run with nothing left to train decides nothing: its recorded decisions stand (none is
// measured again, for a batch or budget it will never train at), and its config.yaml and
// decisions.json are not rewritten; the run finishes what was left (its report). Returns the
// layout as decided.
MemoryFormatChoice kept_decisions(const Config& asked, const Decisions& decisions);

// Loads the resumed checkpoint into `trainer`, checked against this run's config (out of memory
// there is exit 3, said as such), before anything but the log is written: a refused resume leaves
// config.yaml, the metrics and the event files as they were. A run without a checkpoint starts
// again from its config, said; `trained` (nothing left to train) is said once it loaded.
void load_resumed(const ResumeTarget& resume, const Config& config, const torch::Device& device,
                  Trainer& trainer, bool trained);

}  // namespace training
