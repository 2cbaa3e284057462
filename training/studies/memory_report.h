// `train memory`: one training step's memory breakdown (memory_breakdown.h) for several settings,
// side by side, at training.batch_size. The study folder holds:
//
//   <dir>/config.yaml              the effective config
//   <dir>/memory_breakdown.md      the rows per setting in MiB (the same table is logged)
//   <dir>/memory_breakdown.json    the rows in bytes, with each block's output shape
//   <dir>/memory_timeline.json     per setting: bytes held after each allocation and free, marks
//   <dir>/memory_breakdown.png, memory_timeline.png    (scripts/plot_memory.py)
//   <dir>/memory_snapshot-<setting>.pickle    with memory.snapshot (CUDA)
// With --card each setting is also predicted on that card (card_prediction.h), in the table, the
// log and the JSON; with --snapshot FILE, the card's predicted allocator in FILE.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "training/config/config.h"
#include "training/studies/memory_breakdown.h"

namespace training {

struct MemoryRequest {
  std::string config_path;
  std::vector<Override> overrides;
  std::optional<std::string> settings;  // "fp32,bf16+checkpointing"; none = the default list
  std::string output_dir;               // "" = <output.dir>/<date>-<time>-memory-<arch>
  std::string card;                     // a card to predict each setting on (cards.h); "" = none
  // With card: predict only, not measured here (a ResNet-50 step at batch 512 takes minutes on a
  // CPU; the prediction records batches of 2 to 4).
  bool card_only = false;
  // With card: each setting's predicted allocator as PyTorch's memory snapshot (card_snapshot.h).
  std::optional<std::string> snapshot;
};

// The settings to measure: `requested` ("fp32,bf16+checkpointing"; UserError naming --settings),
// or by default fp32, bf16, fp32+checkpointing, bf16+checkpointing in the configured memory
// format, leaving bf16 out where it is not native (said in the log).
std::vector<Setting> memory_settings(const std::optional<std::string>& requested,
                                     const Config& config, const torch::Device& device);

// The side-by-side table in MiB; a value outside its setting's peak is in parentheses.
std::string breakdown_markdown(const std::vector<StepBreakdown>& breakdowns);

// Runs the study and writes its folder (every setting either way): kExitOk, kExitOutOfMemory when
// one ran out of memory, kExitInternalError when one failed; UserError before anything is written.
int memory_command(const MemoryRequest& request);

}  // namespace training
