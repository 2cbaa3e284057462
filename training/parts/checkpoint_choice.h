// checkpointing.enabled: auto. The cheapest gradient checkpointing that makes one training step
// fit a memory budget: which residual blocks to recompute in backward, chosen per run from
// measurements, the way training.memory_format: auto is chosen by timing.
//
// The measurement (measure_blocks): one warm-up and two measured steps at the run's batch,
// precision and layout, every block recomputed alone (the least memory this choice can reach).
// Per block: the bytes it keeps for backward beyond what it keeps when recomputed, and the time
// its recomputation adds; the step cut into windows at the block boundaries, each with its peak.
//
// The model (predicted_peak): a block not recomputed holds its kept bytes from its forward until
// its backward, so a window's peak grows by those of every such block before it; the step's peak
// is the largest window's.
//
// The choice (choose_blocks): the blocks to recompute with the least added time whose predicted
// peak is within the budget (then the fewest blocks, the fewest bytes kept): a knapsack over
// prefixes, solved exactly by dynamic programming on byte counts rounded so that it never exceeds
// the budget. Nothing is recomputed when the plain step fits.
//
// The choice is the run's decision (decisions.json and the checkpoint): report.md shows it and a
// resume recomputes the same blocks without measuring again.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/split.h"
#include "training/config/config.h"
#include "training/config/decisions.h"

namespace training {

struct BlockCost {
  std::string name;              // "layer3.2"
  int64_t kept_bytes = 0;        // held from its forward to its backward unless recomputed
  double recompute_seconds = 0;  // its forward, run again in backward when recomputed
};

// A stretch of the measured step (every block recomputed) and its peak allocated bytes.
// `blocks_before`: the leading blocks whose kept bytes this window would also hold were they not
// recomputed (a block's backward window: the blocks before it; the loss: all of them).
struct PeakWindow {
  std::string name;  // "forward layer2.1", "backward layer3.0", "optimizer step"
  int64_t peak = 0;
  int64_t blocks_before = 0;
};

struct BlockMeasurement {
  std::vector<BlockCost> blocks;  // forward order
  std::vector<PeakWindow> windows;
  double seconds = 0;  // the measurement's own wall time
};

// The step's predicted peak with recomputed[i] for block i.
int64_t predicted_peak(const BlockMeasurement& measurement, const std::vector<bool>& recomputed);

struct CheckpointChoice {
  bool fits = false;
  std::vector<std::string> blocks;  // recomputed, in forward order (empty when the plain step fits)
  int64_t budget = 0;
  std::string budget_source;     // where the budget came from (checkpointing_budget)
  int64_t budget_named = 0;      // the memory budget_source names (CheckpointBudget::named)
  std::string note;              // why a recorded choice was made again; empty otherwise
  int64_t predicted_peak = 0;    // with `blocks`; with every block when nothing fits
  int64_t plain_peak = 0;        // predicted with no block recomputed
  int64_t smallest_peak = 0;     // with every block recomputed: the measured step's
  double extra_seconds = 0;      // per step: the chosen blocks' recomputation
  double all_extra_seconds = 0;  // per step with every block recomputed
  BlockMeasurement measurement;  // what the choice was made from
};

// The cheapest choice for `budget` bytes (see the top of this file; block_choice.cpp).
CheckpointChoice choose_blocks(const BlockMeasurement& measurement, int64_t budget);

// The smallest budget under which a choice cheaper than `chosen` (less added time, then fewer
// blocks) fits; 0 where none is (nothing recomputed). A resume under it or more chooses again.
int64_t cheaper_budget(const BlockMeasurement& measurement, const CheckpointChoice& chosen);

struct CheckpointBudget {
  int64_t bytes = 0;
  std::string source;  // "memory.limit 2 GiB less checkpointing.headroom 10%"
  int64_t named = 0;   // the size `source` names (checkpointing.budget, memory.limit, the card)
};

// A peak and the budget beside it as text, never alike where they differ, and the budget apart
// from the memory its source names (`named`, in the same line: "budget 184.998 MiB (memory.limit
// 185.00 MiB less ...)").
std::pair<std::string, std::string> peak_and_budget_text(int64_t peak, int64_t budget,
                                                         int64_t named);
// The budget of `decision` as its choice's line wrote it (peak_and_budget_text beside its peak),
// for every line and table that writes it again: one budget, one text.
std::string budget_text(const CheckpointingDecision& decision, int64_t named);

// Why checkpointing auto has no budget on `device`: on the CPU, neither checkpointing.budget nor
// memory.limit ("needs a memory budget, and on the CPU ..."); empty when it has one. With `key`,
// a KeyError naming it instead. Touches no CUDA context (a sweep's parent asks it).
std::string missing_budget(const Config& config, const torch::Device& device,
                           const char* key = nullptr);

// checkpointing.budget when set; else memory.limit, or on CUDA the card's memory less what this
// process holds outside the allocator, less checkpointing.headroom. KeyError naming
// checkpointing.enabled on a CPU with neither.
CheckpointBudget checkpointing_budget(const Config& config, const torch::Device& device);

// The measurement at the top of this file, on `device` under memory.limit. Out of memory
// propagates (the step with every block recomputed does not fit).
BlockMeasurement measure_blocks(const Config& config, const torch::Device& device);

using MeasureBlocks = std::function<BlockMeasurement(const Config&, const torch::Device&)>;

// The step a choice is made for, as its decision's chosen_for records it (decisions.h's
// step_signature, with the layout this config runs in on `device`).
std::string step_signature(const Config& config, const torch::Device& device);

// What a run holds on `device` beside one training step, which the measurement does not: what its
// loader over `train` holds ahead (data/loader.h's Ahead, a preparation's peak measured on a batch
// of `train`), the epoch's order where it lives on the device, and on CUDA with
// data.device_resident both splits (`train` and `test_size` samples; on the CPU host data).
int64_t held_beside_step(const Config& config, const torch::Device& device,
                         const data::Split& train, int64_t test_size);

// checkpointing.enabled: auto's decision, in `decisions.checkpointing`: the recorded one while it
// holds (this step, its peak within this run's budget), else measured (`measure`: tests' stand-in)
// and chosen now. `config` has its layout decided; `beside_step` (held_beside_step) is taken off
// the budget. Returns the choice made now (nullopt: not auto, blocks given, or the recorded one
// kept). Refused: data-parallel (KeyError: each rank would choose its own) and a budget nothing
// fits (OutOfMemory: the budget, the smallest peak reachable).
std::optional<CheckpointChoice> resolve_checkpointing(const Config& config, Decisions& decisions,
                                                      const torch::Device& device,
                                                      bool data_parallel,
                                                      const MeasureBlocks& measure = {},
                                                      int64_t beside_step = 0);

// What checkpointing.enabled: auto recomputes in a study's step: the blocks and the predicted
// peak of the decision, or the blocks given by hand (predicted peak 0: nothing was predicted);
// nullopt when not auto (no blocks are chosen).
std::optional<std::pair<std::vector<std::string>, int64_t>> auto_blocks(const Config& config,
                                                                        const Decisions& decisions);

// One line for the log: the budget, the blocks, the predicted peaks and the time added.
std::string describe_choice(const CheckpointChoice& choice);

// checkpointing auto's lines in the log: the choice made now (its note, the choice, at debug its
// measurement), the one recorded (a resume), or the blocks given.
void log_checkpointing_choice(const Config& config, const Decisions& decisions,
                              const std::optional<CheckpointChoice>& choice);

// The measurement behind a choice, a line per block (kept bytes, recomputation time, chosen or
// not) and per window (peak, blocks before it), for train.log.
std::string describe_measurement(const CheckpointChoice& choice);

// The size a run's checkpointing budget is named by (CheckpointBudget::named; the card's memory
// aside): checkpointing.budget where given, else memory.limit (0: none).
inline int64_t budget_named(const Config& config) {
  return config.checkpointing.budget() > 0 ? config.checkpointing.budget() : config.memory.limit;
}

// The choice verified: a run's measured training peak beside the prediction, and whether it
// stayed within the budget (and by how much it did not). `exceeded` is set when it did not.
// Empty without a decision with a predicted peak and a budget. The budget is written as precisely
// as the choice's line wrote it: apart from the chosen peak and from `named`, the size it is
// named by (budget_named; 0: none).
std::string checkpointing_outcome(const std::optional<CheckpointingDecision>& decision,
                                  int64_t measured_peak, bool* exceeded = nullptr,
                                  int64_t named = 0);

}  // namespace training
