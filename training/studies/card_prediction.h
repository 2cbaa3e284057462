// Does a step fit on a card this machine does not have? The step's allocation stream is recorded
// on the CPU (platform/allocation_trace.h: every tensor allocation and free, in order, with the
// phases of three training steps), at two small batches; each allocation's size is taken as linear
// in the batch (checked, allocation by allocation, on a third batch), so the stream of any batch
// follows without running it. That stream, with what a card adds inside the allocator (cards.h:
// the cuBLAS workspaces), is replayed through the model of the CUDA caching allocator
// (caching_allocator.h) under the card's memory less what lies outside the allocator. Out: the
// predicted allocated and reserved peaks per phase, whether it fits, and the largest batch that
// fits (found by replaying, batch by batch).
//
// What it does not model, said wherever its figures are shown: cuDNN's workspaces (transient, come
// from the caching allocator, larger under training.cudnn_benchmark), allocations made on other
// streams, and a context size measured on another card.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "training/config/config.h"
#include "training/platform/allocation_trace.h"
#include "training/platform/device.h"
#include "training/studies/caching_allocator.h"
#include "training/studies/cards.h"
#include "training/studies/setting.h"

namespace training {

// The batches the stream is recorded at: two to scale from, a third to check the scaling on.
inline constexpr int64_t kTraceBatches[3] = {2, 4, 3};
inline constexpr int kTraceSteps = 3;

// One setting's step on the CPU at `batch`, `steps` times, with marks "held" (the allocations made
// before: weights, buffers, the batch; with sweep.data_parallel, c10d's Reducer's gradient buckets
// of distributed.bucket_mb, as a data-parallel trial holds them) and "stepN
// forward|backward|optimizer|end". With setting.accumulate_steps N > 1 each step is N
// micro-batches, marked "stepN microM ...": the first micro-batch's gradients are held through the
// others (CardPredictor records N = 2, which every later micro-batch repeats). One CPU thread, so
// that the stream is the same at every batch. Checkpointing auto is refused (UserError): its blocks
// depend on the budget. fp16 with `fp16_through_bf16` (where the CPU has native bf16) runs bf16's
// kernels under fp16's GradScaler: autocast's CPU casts are one list for both 2-byte types, so the
// tensors are the same, and the CPU's own fp16 kernels are far slower (ResNet-18 at 32x32: 13.0 s
// against 1.5 s here; ResNet-50 at 224 did not finish in 10 minutes).
AllocationStream record_step_stream(const Config& config, const Setting& setting, int64_t batch,
                                    int steps = kTraceSteps,
                                    bool fp16_through_bf16 = cpu_has_native_bf16());

// A stream whose allocation sizes are linear in the batch, from its recordings at batches a < b.
struct LinearStream {
  AllocationStream at_a;
  std::vector<int64_t> slope_numerator;  // per event: size(b) - size(a)
  int64_t a = 0, b = 0;
  // The stream at `batch` (>= 1): each size a + (size(b) - size(a)) * (batch - a) / (b - a),
  // rounded up to whole bytes.
  AllocationStream at(int64_t batch) const;
  // The first batch at which one allocation alone is larger than `bytes`; none when no
  // allocation grows with the batch.
  std::optional<int64_t> first_batch_over(int64_t bytes) const;
};

// Throws std::runtime_error naming the first event where the two recordings differ in order.
LinearStream linear_stream(const AllocationStream& at_a, int64_t a, const AllocationStream& at_b,
                           int64_t b);
// How many allocations of `recorded` (at `batch`) differ in size from `stream.at(batch)`; -1 when
// the order of events differs.
int64_t mismatched_allocations(const LinearStream& stream, const AllocationStream& recorded,
                               int64_t batch);

struct PhasePeak {
  std::string phase;  // "step2 backward"
  int64_t allocated = 0, reserved = 0;
};

struct Replay {
  bool fits = true;       // no allocation failed
  std::string failed_at;  // the phase of the failed allocation
  int64_t peak_allocated = 0, peak_reserved = 0;
  std::string peak_phase;  // where the allocated peak falls
  std::vector<PhasePeak> phases;
  int64_t retries = 0;
};

// Replays `stream` through the model; the card's workspaces are allocated where the first
// backward begins (cuBLAS creates them at the first matrix multiply of each thread) and kept.
Replay replay_stream(const AllocationStream& stream, const AllocatorOptions& options,
                     const BesideTensors& beside);

// The smallest allocator limit, in whole MiB, on which `stream` replays without running out
// (options.limit aside), and that replay in `at_it`.
int64_t smallest_fitting_limit(const AllocationStream& stream, AllocatorOptions options,
                               const BesideTensors& beside, Replay* at_it);

// `stream` with `count` batches of `batch` images (fp32, 3 x image_size x image_size, and int64
// labels) allocated where its "held" mark is: the loader's prefetched batches, which a training run
// holds on the card.
AllocationStream with_prefetched_batches(AllocationStream stream, int64_t count, int64_t batch,
                                         int64_t image_size);

// The largest batch whose replay (with `prefetched` batches) fits under `options` (its limit set):
// doubling, then bisection, below the first batch at which one allocation alone outgrows the
// limit, and at most kMaxBatchSize (training.batch_size's largest); 0 when batch 1 does not fit.
// Throws std::runtime_error when no allocation grows.
int64_t largest_fitting_batch(const LinearStream& stream, int64_t prefetched, int64_t image_size,
                              const AllocatorOptions& options, const BesideTensors& beside);

struct CardPrediction {
  Card card;
  BesideTensors beside;
  // limit = the card's memory less outside_allocator, or memory.limit when that is smaller (on
  // CUDA it caps the allocator's reserved bytes, as a memory fraction does).
  AllocatorOptions allocator;
  bool limited_by_memory_limit = false;
  int64_t prefetched_batches = 0;  // data.prefetch as on CUDA (auto: 2)
  // sweep.data_parallel: the Reducer's gradient buckets each rank holds (in the stream); else 0.
  int64_t reducer_bucket_bytes = 0;
  int64_t batch_size = 0;
  Replay replay;
  // What the step needs: the same stream replayed under needed_limit, the smallest allocator
  // limit (in whole MiB) on which it fits. (Replayed without a limit, a step near a card's edge
  // "needed" tens of GiB more: nothing cached is ever freed there.)
  Replay needed;
  int64_t needed_limit = 0;
  int64_t largest_batch = 0;  // by replay; 0 = not even batch 1
  int64_t checked_batch = 0;  // the batch the scaling was checked on
  int64_t mismatched = 0;     // allocations of that batch the scaling got wrong
  // The peaks to report: the card's replay where it fits; where it does not (the replay stops at
  // the allocation that fails), what the step needs, so that the margin says how much is missing.
  const Replay& figures() const { return replay.fits ? replay : needed; }
  int64_t device_bytes() const { return figures().peak_reserved + beside.outside_allocator; }
  // What is left: of the card, or, where memory.limit caps the allocator, of that limit.
  int64_t margin() const {
    return limited_by_memory_limit ? allocator.limit - figures().peak_reserved
                                   : card.memory_bytes - device_bytes();
  }
};

// Predictions for many settings and batches on one card, from `config` (its model, data.prefetch,
// memory.limit): each setting's stream is recorded once (three recordings, the third the check).
// The allocator's limit: `allocator_limit` when given (> 0), else the card's memory less what lies
// outside the allocator, or memory.limit when that is smaller.
class CardPredictor {
 public:
  CardPredictor(Config config, Card card, AllocatorOptions options, int64_t allocator_limit = 0);
  CardPrediction predict(const Setting& setting, int64_t batch);
  const Card& card() const { return card_; }

 private:
  struct Recorded {
    Setting setting;
    LinearStream stream;
    int64_t mismatched = 0;
  };
  const Recorded& recorded(const Setting& setting);

  Config config_;
  Card card_;
  BesideTensors beside_;
  AllocatorOptions allocator_;
  bool limited_by_memory_limit_ = false;
  int64_t reducer_bucket_bytes_ = 0;
  std::vector<Recorded> recorded_;
};

// Records `setting` on the CPU (three short recordings) and predicts it at config's batch on
// `card`.
CardPrediction predict_on_card(const Config& config, const Setting& setting, const Card& card,
                               const AllocatorOptions& allocator);

// The prediction as it is logged: one line a setting.
std::string prediction_line(const std::string& setting, const CardPrediction& p);
// The fields every output with --card carries for a setting: card (name, memory_bytes,
// memory_source, architecture), predicted_allocated_peak_bytes, predicted_reserved_peak_bytes,
// predicted_device_bytes, fits, margin_bytes, largest_batch, and how (the phases, the workspaces,
// what lies outside the allocator and its source, the allocator's options, the scaling check).
nlohmann::ordered_json prediction_json(const CardPrediction& p);
// Flat columns for a table row (a sweep trial): card, card_memory_bytes,
// predicted_allocated_peak_bytes, predicted_reserved_peak_bytes, predicted_device_bytes, fits
// (fits_on_card), largest_batch_on_card.
nlohmann::ordered_json prediction_columns(const CardPrediction& p);
// A markdown section: a row a setting, and what is modelled and what is not.
std::string prediction_markdown(const std::vector<std::pair<std::string, CardPrediction>>& rows);

}  // namespace training
