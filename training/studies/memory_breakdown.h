// Where the memory of one training step goes. One warm-up step, then one measured train_step whose
// phases are observed: the allocated bytes at each boundary, each phase's peak, every allocation
// and free on a timeline, and the activations each residual block (checkpointed segment) keeps
// for backward: the allocated-bytes delta across its forward while autograd records.
//
// The rows and how they add up to the step's peak:
//   static       weights (+ BN buffers), optimizer state (momentum), GradScaler state, the batch
//   gradients    held from the end of backward through the optimizer step
//   activations  stem, each block, head (pool, fc, loss), autocast's cached low-precision weight
//                copies (bf16/fp16): what is held at the end of forward beyond the static rows
//   transient    forward: its peak above its end; backward: its peak above the end of forward
//                (gradients so far and temporaries, minus the activations already freed);
//                optimizer step: its peak above its start
// The peak falls in one phase; its itemized value is static + activations + that phase's
// transient (optimizer: static + gradients + transient). Unexplained = measured - itemized.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "training/config/config.h"
#include "training/config/setting.h"
#include "training/platform/memory_timeline.h"
#include "training/studies/trial.h"

namespace training {

enum class RowGroup { Static, Gradients, Activations, Transient };
const char* group_name(RowGroup group);  // "static", "gradients", ... (memory_breakdown.json)
enum class StepPhase { Forward, Backward, Optimizer };
const char* phase_name(StepPhase phase);  // "forward", "backward", "optimizer"

struct MemoryRow {
  std::string name;  // "weights", "layer1.0", "transient: backward"
  RowGroup group = RowGroup::Static;
  std::string stage;           // activations: stem, layer1..layer4, head or autocast
  std::vector<int64_t> shape;  // a block's (segment's) output shape
  int64_t bytes = 0;
  bool at_peak = false;  // part of the peak's composition
};

struct StepBreakdown {
  Setting setting;
  int64_t batch_size = 0;
  TrialStatus status = TrialStatus::Error;
  std::string message;  // why, for OutOfMemory and Error
  std::vector<MemoryRow> rows;
  StepPhase peak_phase = StepPhase::Forward;
  int64_t measured_peak_bytes = 0;
  int64_t itemized_peak_bytes = 0;  // the at_peak rows' sum
  int64_t reserved_bytes = 0;  // held by the allocator after the measured step (CPU: allocated)
  std::vector<MemoryTimeline::Point> timeline;
  std::vector<MemoryTimeline::Mark> marks;
  int64_t timeline_events = 0;
  // memory.snapshot (CUDA): the caching allocator's pickled history of the measured step.
  std::string snapshot;
  // checkpointing auto: as TrialResult's.
  std::optional<std::vector<std::string>> recomputed_blocks;
  int64_t predicted_peak_bytes = 0;

  int64_t unexplained_bytes() const { return measured_peak_bytes - itemized_peak_bytes; }
  // The rows of one group (activations: one stage when `stage` is given), summed.
  int64_t sum(RowGroup group, const std::string& stage = "") const;
};

// Measures `setting` at config.training.batch_size on config.training.device (memory.limit applies)
// in this process. Out of memory is a result, as in a sweep trial. The timeline keeps at most
// `timeline_points` points (memory_timeline.h).
StepBreakdown measure_breakdown(const Config& config, const Setting& setting,
                                int64_t timeline_points = 8192);

}  // namespace training
