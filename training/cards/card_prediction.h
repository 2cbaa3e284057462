// Does a step fit on a card this machine does not have? The step's allocation stream, recorded on
// the CPU at two small batches (step_recording.h), scaled to any batch (linear_stream.h) and
// replayed with the card's cuBLAS workspaces (cards.h) through the model of the CUDA caching
// allocator under the card's memory less what lies outside the allocator (stream_replay.h), gives
// the peaks per phase, whether it fits, and the largest batch that fits. Here: CardPredictor,
// which drives the three, and its figures.
//
// What it does not model, said wherever its figures are shown: cuDNN's workspaces (transient, come
// from the caching allocator, larger under training.cudnn_benchmark), allocations made on other
// streams, and a context size measured on another card.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "training/cards/caching_allocator.h"
#include "training/cards/cards.h"
#include "training/cards/linear_stream.h"
#include "training/cards/speed_model.h"
#include "training/cards/step_recording.h"
#include "training/cards/stream_replay.h"
#include "training/config/config.h"
#include "training/config/setting.h"

namespace training {

// The batches the stream is recorded at: two to scale from, a third to check the scaling on.
inline constexpr int64_t kTraceBatches[3] = {2, 4, 3};

struct CardPrediction {
  Card card;
  BesideTensors beside;
  // limit = the card's memory less outside_allocator, or memory.limit when that is smaller (on
  // CUDA it caps the allocator's reserved bytes, as a memory fraction does).
  AllocatorOptions allocator;
  bool limited_by_memory_limit = false;
  // The loader's prefetched batches and data.device_resident's splits, held beside the step.
  HeldData held;
  // sweep.data_parallel: the Reducer's gradient buckets each rank holds (in the stream); else 0.
  int64_t reducer_bucket_bytes = 0;
  int64_t batch_size = 0;
  Replay replay;
  // What the step needs: the replay under needed_limit, the smallest allocator limit (whole MiB)
  // on which it fits; without a limit nothing cached is freed, so it would need far more.
  Replay needed;
  int64_t needed_limit = 0;
  // Where it does not fit and a card given by its size has other cuBLAS workspaces (32 MiB against
  // 8.125 MiB below compute capability 9): the smallest `--card SIZE` that fits it; else 0.
  int64_t needed_by_size = 0;
  // By replay (largest_fitting_batch): fits with the next one not, at or above every batch of the
  // setting asked for that fits (fitting is not monotone in the batch); 0 = none fits.
  int64_t largest_batch = 0;
  // train_images_at_most (0: not known): a largest batch above it is said to be refused by train.
  int64_t train_images = 0;
  int64_t accumulate_steps = 1;  // the setting's micro-batches a step: a step's images, x batch
  std::string largest_batch_text() const;  // "3136", "5000 (more than the 256 training ...)"
  int64_t checked_batch = 0;               // the batch the scaling was checked on
  int64_t mismatched = 0;                  // allocations of that batch the scaling got wrong
  // The step's time on the card, estimated (speed_calibration.h); else why not in no_speed.
  std::optional<StepEstimate> speed;
  std::string no_speed;
  // Why the card cannot run the setting (bf16 before sm_80); its memory is still predicted.
  std::string unsupported;
  // Whether the card runs the setting at this batch: it can run it at all, and the replay fits.
  bool fits() const { return replay.fits && unsupported.empty(); }
  // "yes", "no (out of memory in ...)", or "cannot run: ..."; a batch below largest_batch that
  // does not fit says so.
  std::string fits_text() const;
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

// What a run of `config` holds on a card beside its step: data.prefetch's batches as on CUDA and,
// with data.device_resident, its splits, counted (data::split_size: DataError where the data is
// missing).
HeldData held_data(const Config& config);

// A graceful stop (stop_signal.h) taken by CardPredictor::predict before one of its recordings:
// the setting is not predicted (nothing of it is kept), and its caller stops (train sweep --card).
class RecordingStopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Predictions for many settings and batches on one card, from `config`: each setting's stream is
// recorded once (three recordings, the third the check), with held_data(config) beside each step.
// The allocator's limit: `allocator_limit` when > 0, else the card's memory less what lies outside
// the allocator, or memory.limit when that is smaller.
class CardPredictor {
 public:
  CardPredictor(Config config, Card card, AllocatorOptions options, int64_t allocator_limit = 0);
  // With `snapshot`, also the card's allocator as its figures() have it (allocator_snapshot.h):
  // at the reserved peak of the card's replay, or where the step does not fit, of the replay
  // under the smallest limit on which it fits.
  CardPrediction predict(const Setting& setting, int64_t batch,
                         AllocatorSnapshot* snapshot = nullptr);
  // The setting's largest batch by its latest prediction (at or above each batch predicted to fit),
  // one figure for all its batches; none before any prediction.
  std::optional<int64_t> largest_batch(const Setting& setting) const;
  const Card& card() const { return card_; }
  const HeldData& held() const { return held_; }  // held_data(config), counted once

 private:
  struct Recorded {
    Setting setting;
    LinearStream stream;
    int64_t mismatched = 0;
    std::vector<int64_t> shown;  // the batches predicted, each once
    int64_t largest = 0;         // largest_fitting_batch over `shown`
  };
  Recorded& recorded(const Setting& setting);

  Config config_;
  Card card_;
  BesideTensors beside_;
  AllocatorOptions allocator_;
  bool limited_by_memory_limit_ = false;
  int64_t reducer_bucket_bytes_ = 0;
  HeldData held_;  // its prefetched batches and its resident data
  std::vector<Recorded> recorded_;
};

// Records `setting` on the CPU (three short recordings) and predicts it at config's batch on
// `card` (with `snapshot`, as CardPredictor::predict).
CardPrediction predict_on_card(const Config& config, const Setting& setting, const Card& card,
                               const AllocatorOptions& allocator,
                               AllocatorSnapshot* snapshot = nullptr);

// The prediction as it is logged: one line a setting.
std::string prediction_line(const std::string& setting, const CardPrediction& p);
// The fields every output with --card carries for a setting: the card, the predicted peaks, fits,
// margin, largest batch, and how (phases, workspaces, outside the allocator, options, scaling).
nlohmann::ordered_json prediction_json(const CardPrediction& p);
// Flat columns for a table row (a sweep trial): the card, the predicted peaks, fits_on_card, ...
nlohmann::ordered_json prediction_columns(const CardPrediction& p);
// A markdown section: a row a setting, and what is modelled and what is not.
std::string prediction_markdown(const std::vector<std::pair<std::string, CardPrediction>>& rows);

}  // namespace training
