// `train plan --memory 12GiB`: what to run on a card of that size. Among a sweep's measured
// settings, the one with the highest images/s whose predicted peak (the larger of the setting's
// fitted line at that batch and the measured peak), plus the memory outside the allocator, fits
// the card less a headroom. Without a sweep, a small one is run first (sweep.time_budget).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "training/cards/cards.h"
#include "training/config/config.h"
#include "training/studies/sweep.h"

namespace training {

struct PlanCandidate {
  Setting setting;
  int64_t batch = 0;
  double images_per_second = 0;  // measured, or with a card the sweep did not run on, estimated
  int64_t predicted_peak = 0;  // bytes the allocator will hold at the peak (with a card: reserved)
  int64_t predicted_allocated = 0;  // with a card: the allocated peak by replay
  bool fits = false;        // predicted_peak + overhead <= usable (with a card: the replay fits)
  std::string unsupported;  // why the card cannot run it at all (bf16 before sm_80)
  // Why `train` would refuse it with the sweep's config (more images a step than the training set
  // has); never recommended.
  std::string untrainable;
  std::string speed_why;  // an estimated speed's bound ("memory-bound: BatchNorm and ReLU 58% ...")
  // Why its speed is not estimated where the others' are (a graph-captured step): ranked last.
  std::string speed_not_estimated;
  // Where it does not fit (else 0): the allocator's limit it needs (with a card, by replay) and,
  // where it differs, the one `--card SIZE` needs.
  int64_t needed_limit = 0;
  int64_t needed_limit_by_size = 0;
  // With a card, auto: not even every block recomputed fits (its peaks that replay's).
  bool every_block_short = false;
};

struct Plan {
  int64_t card_bytes = 0;
  double headroom = 0;       // share of the card kept free
  int64_t usable_bytes = 0;  // card x (1 - headroom)
  int64_t overhead_bytes = 0;
  std::string overhead_source;
  std::vector<PlanCandidate> candidates;  // fastest first
  std::optional<size_t> chosen;           // the fastest that fits
  std::vector<SettingSummary> cells;      // per setting: the largest batch predicted to fit
  bool sweep_complete = true;  // false: stopped, out of time, or a search ended on a failed trial
  // The sweep's `on` cells recomputed every block alone, which auto can match (recommended_flags).
  bool per_block_checkpointing = false;
  // --card: peaks by replay on it, and speeds estimated where the sweep did not run on CUDA.
  std::optional<Card> card;
  // Where images/s comes from: the sweep, a named card's data sheet, or none (a card given by its
  // size: ranked by memory, the largest batch first; no other card's figures stand in).
  enum class Speed { Measured, Estimated, None } speed = Speed::Measured;
  std::string speed_source;  // "measured on cpu", "estimated for H100-80GB by the ..."
  // By replay, per setting (CardPredictor::largest_batch); 0 = none fits.
  std::vector<std::pair<Setting, int64_t>> largest_on_card;
  std::string allocator_options;      // with a card: the options replayed under ("" = the defaults)
  int64_t device_resident_bytes = 0;  // with a card and data.device_resident: in every peak
  // --target-batch (0: none): each candidate is batch x accumulate_steps = target_batch, its peak
  // with the accumulated gradients (gradient_bytes) beside the micro-batch's step.
  int64_t target_batch = 0;
  int64_t gradient_bytes = 0;
  int64_t train_images = 0;  // the sweep config's training set at most (0: not known)
};

// "H100-SXM (79.65 GiB) with 10% headroom and 771.00 MiB outside the allocator"
std::string plan_target_text(const std::optional<Card>& card, int64_t card_bytes, double headroom,
                             int64_t overhead);
// UserError ("...: that leaves the allocator no memory") where the card less its headroom and what
// lies outside the allocator leaves nothing, or, given the small sweep's `grid`, less than its
// weights, gradients and momentum take at every precision it sweeps: known before any
// measurement or replay.
void refuse_no_room(const std::optional<Card>& card, int64_t card_bytes, double headroom,
                    int64_t overhead, const Config* grid = nullptr);
// UserError naming --target-batch where no batch of `batches` makes `target` in at most
// kMaxAccumulateSteps micro-batches, or where it is more than `train_images` (0: not known).
void check_target_batch(int64_t target, std::vector<int64_t> batches, int64_t train_images,
                        const std::string& measured);
// UserError naming `flag` where the `fewest` images a step of `what` are more than `train_images`.
void refuse_too_few_images(int64_t fewest, int64_t train_images, const std::string& flag,
                           const std::string& what);
// The smallest card (whole MiB) whose memory, less the plan's headroom and what lies outside the
// allocator, leaves the allocator `limit` bytes; nullopt where that is above the largest card
// --card and --memory take (kLargestCard: a headroom near 100%).
std::optional<int64_t> card_needed_for(const Plan& plan, int64_t limit);
// "needs a card of at least 2138MiB", and the size `--card SIZE` needs where that differs: of
// `by_size` where given (the candidate smallest on a card given by its size, named where it is
// another).
std::string needs_card_text(const Plan& plan, const PlanCandidate& candidate,
                            const PlanCandidate* by_size = nullptr);

// The plan for a card of `card_bytes` from the sweep in `sweep_dir` (read_sweep). `overhead`:
// nullopt = measured by a CUDA sweep, or kOutsideAllocatorBytes. With `card`: its peaks by replay,
// ranked by its estimated images/s where the sweep did not run on CUDA. With `target_batch` (> 0):
// candidates for that effective batch only. UserError when no setting fits (naming the smallest
// card one needs) or no measured batch divides the target (naming --target-batch).
Plan make_plan(const std::filesystem::path& sweep_dir, int64_t card_bytes, double headroom,
               std::optional<int64_t> overhead, const std::optional<Card>& card = std::nullopt,
               int64_t target_batch = 0);
// The plan as JSON: the card and, per candidate, its setting, batch, images/s (and their source),
// predicted peak, fits and, with a card, the prediction's fields (card_prediction.h).
nlohmann::ordered_json plan_json(const Plan& plan);

// The table (fastest first, each with why it lost) and the per-setting predictions.
std::string plan_table(const Plan& plan);
// "--set training.batch_size=128 --set training.precision=bf16 ...". Per-block checkpointing (auto,
// or on with granularity block) is recommended as auto with the plan's budget: it recomputes only
// what that budget needs, so it is at least as fast as measured. Other granularities as measured.
std::string recommended_flags(const Plan& plan, const PlanCandidate& candidate);

// `train plan`'s request, its flags checked (app/flag_values.h).
struct PlanRequest {
  int64_t memory = 0;        // the card's memory in bytes
  std::optional<Card> card;  // a card by name or size (cards.h): peaks by replay, speed estimated
  double headroom = 0.1;
  std::optional<int64_t> overhead;  // nullopt: measured by a CUDA sweep, or assumed
  std::string from;                 // a sweep directory; "" = run a small sweep first
  std::string config_path;
  std::vector<Override> overrides;
  std::string output_dir;  // of the small sweep; "" = <output.dir>/<date>-<time>-plan-<arch>
  std::filesystem::path executable;
  int64_t budget_seconds = 300;  // the small sweep's sweep.time_budget
  std::string json;              // where to write plan_json ("" = nowhere)
  // Images per optimizer step to reach by gradient accumulation (0 = none): the plan then
  // answers with micro-batch x training.accumulate_steps per setting.
  int64_t target_batch = 0;
};

// Prints the table and the recommended flags on stdout. kExitOk, or kExitStopped when the small
// sweep was stopped; UserError for a card too small for every setting.
int plan_command(const PlanRequest& request);

}  // namespace training
