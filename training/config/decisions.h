// What a run's autos decided (the layout, checkpointing's blocks) and from what, beside
// config.yaml's auto: in decisions.json and the checkpoint, kept by a resume where they hold, shown
// by report.md and train compare.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/MemoryFormat.h>

#include <optional>
#include <string>
#include <vector>

#include "training/config/config.h"

namespace training {

// training.memory_format: auto, decided.
struct LayoutDecision {
  c10::MemoryFormat format = c10::MemoryFormat::Contiguous;
  std::string device_type;  // "cpu", "cuda": where it was decided (another device decides again)
  std::string reason;       // "auto: timed here over 3 steps ..."
  std::string chosen_for;   // the step, without its layout (another step decides again)
};

// checkpointing.enabled: auto, decided.
struct CheckpointingDecision {
  std::vector<std::string> blocks;  // recomputed, in forward order (empty: the plain step fits)
  std::string chosen_for;           // the step: "resnet50 cifar stem, 10 classes, batch 32, ..."
  int64_t budget = 0;               // bytes it was checked against (this run's, once kept)
  int64_t predicted_peak = 0;       // the step's predicted peak with `blocks`
  double predicted_extra_ms = 0;    // the recomputation added to a step
  int64_t beside_bytes = 0;         // what the run holds beside the step, outside `budget`
  int64_t from_step = 0;     // optimizer steps the run had taken when it was made: the epochs
                             // recorded after it (a step count above) trained under it
  int64_t cheaper_from = 0;  // the budget from which a cheaper choice fits (0: none is cheaper)
};

// The training peak of the last epoch recorded under `decision` (a row past its from_step), if any.
template <typename Rows>
std::optional<int64_t> peak_under(const CheckpointingDecision& decision, const Rows& epochs) {
  for (auto it = epochs.rbegin(); it != epochs.rend(); ++it) {
    if (it->step > decision.from_step) return it->train_peak_allocated_bytes;
  }
  return std::nullopt;
}

// The step a decision holds for (its chosen_for): all that sets a step's memory and time, the
// layout where given, and the device (device_identity; on CUDA cuDNN's benchmark mode and TF32):
// "resnet18 cifar stem, 10 classes, batch 32, fp32, contiguous, sgd with momentum, nesterov, weight
// decay, fused, on cpu (...)". Optimizer figures that leave the step alike (a momentum of 0.9 or
// 0.85) are not in it. What a run holds beside the step (the loader's batches, device-resident
// data) is taken off the budget a recorded choice is checked against instead.
std::string step_signature(const Config& config, const std::optional<c10::MemoryFormat>& layout,
                           const c10::Device& device);

struct Decisions {
  std::optional<LayoutDecision> layout;
  std::optional<CheckpointingDecision> checkpointing;
};

// `asked` with each decision in place of its auto (blocks where checkpointing auto gives none).
Config decided(const Config& asked, const Decisions& decisions);

// The keys of `asked` a decision would fill ("training.memory_format and ..."; "" for none).
std::string undecided_keys(const Config& asked);

// decisions.json's text (a JSON object; "{}" when nothing was decided).
std::string decisions_json(const Decisions& decisions);

// Its inverse. UserError naming `origin` and the entry when the text is not such an object.
Decisions parse_decisions(const std::string& json, const std::string& origin);

// Decisions that fit `config`'s model: the recorded blocks each a block of it, once. UserError
// naming `origin` otherwise (a run would fail on them after it started).
void check_decisions(const Decisions& decisions, const Config& config, const std::string& origin);

}  // namespace training
