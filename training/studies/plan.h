// `train plan --memory 12GiB`: what to run on a card of that size. Among a sweep's measured
// settings (precision x checkpointing x memory format x batch), the one with the highest measured
// images/s whose predicted peak, plus the device memory outside the allocator, fits the card
// less a safety headroom. The prediction is the sweep's own memory model (memory_model.h, through
// sweep.h's summarize): the larger of the setting's fitted line at that batch and the measured
// peak. Without a sweep, a small one is run first (sweep.time_budget bounds it).
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
  // it has at most, config.h's train_images_at_most); empty when it trains. Never recommended.
  std::string untrainable;
  std::string speed_why;  // an estimated speed's bound ("memory-bound: BatchNorm and ReLU 58% ...")
  // Why its speed is not estimated where the others' are (a graph-captured step): ranked last.
  std::string speed_not_estimated;
  // Where it does not fit (else 0): the allocator's limit it needs (with a card: the smallest on
  // which its replay fits; else predicted_peak) and, where the card's cuBLAS workspaces are not
  // those of a card given by its size, the limit `--card SIZE` needs (else 0).
  int64_t needed_limit = 0;
  int64_t needed_limit_by_size = 0;
  // With a card, checkpointing auto: not even every block recomputed, the least auto holds, fits
  // the card (by replay); the peaks are then that replay's, not the sweep's.
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
  // The sweep's checkpointing.granularity was block: its `on` cells recomputed every block alone,
  // which checkpointing.enabled: auto can match (see recommended_flags).
  bool per_block_checkpointing = false;
  // With a card (--card): predicted_peak is the card's reserved peak by replay (card_prediction.h)
  // and, when the sweep ran on another device, images_per_second the speed model's estimate
  // (training/cards/speed_calibration.h).
  std::optional<Card> card;
  // Where images/s comes from: measured by the sweep, estimated for a named card from its data
  // sheet, or none (a card given by its size has no data sheet: the candidates are ranked by
  // memory, the largest batch that fits first; no other card's figures stand in).
  enum class Speed { Measured, Estimated, None } speed = Speed::Measured;
  std::string speed_source;  // "measured on cpu", "estimated for H100-80GB by the ..."
  // By replay, after every candidate: per setting, at or above each of its candidates that fits
  // (CardPredictor::largest_batch); 0 = none fits.
  std::vector<std::pair<Setting, int64_t>> largest_on_card;
  std::string allocator_options;      // with a card: the options replayed under ("" = the defaults)
  int64_t device_resident_bytes = 0;  // with a card and data.device_resident: in every peak
  // --target-batch: images per optimizer step; each candidate is then micro-batch (batch) x
  // cell.accumulate_steps = target_batch, its peak with the accumulated gradients
  // (gradient_bytes) held beside the micro-batch's step. 0: no target.
  int64_t target_batch = 0;
  int64_t gradient_bytes = 0;
  int64_t train_images = 0;  // the sweep config's training set at most (0: not known)
};

// "10%" for 0.1, "12.345%" for 0.12345: as given, never rounded to another figure.
std::string percent_text(double share);
// "H100-SXM (79.65 GiB) with 10% headroom and 771.00 MiB outside the allocator"
std::string plan_target_text(const std::optional<Card>& card, int64_t card_bytes, double headroom,
                             int64_t overhead);
// UserError ("...: that leaves the allocator no memory") where the card (--card) less its
// headroom and what lies outside the allocator leaves the allocator nothing: known before any
// measurement or replay (with --from and --memory, a plan says instead how large a card it needs);
// given the small sweep's `grid`, also where that share is below what its weights, gradients and
// momentum alone take, whatever the batch.
void refuse_no_room(const std::optional<Card>& card, int64_t card_bytes, double headroom,
                    int64_t overhead, const Config* grid = nullptr);
// UserError naming --target-batch where no batch of `batches` (what the sweep `measured` or will)
// makes `target` in at most training.accumulate_steps' most micro-batches, or where `target` is
// more than `train_images` (0: not known).
void check_target_batch(int64_t target, std::vector<int64_t> batches, int64_t train_images,
                        const std::string& measured);
// UserError naming `flag` where the `fewest` images a step of `what` are more than `train_images`.
void refuse_too_few_images(int64_t fewest, int64_t train_images, const std::string& flag,
                           const std::string& what);
// The smallest card (whole MiB) whose memory, less the plan's headroom and what lies outside the
// allocator, leaves the allocator `limit` bytes.
int64_t card_needed_for(const Plan& plan, int64_t limit);
// "needs a card of at least 2138MiB", and where the candidate's card is named and its cuBLAS
// workspaces are not those of a card given by its size, that size too: each one `--card` or
// `--memory` takes back.
std::string needs_card_text(const Plan& plan, const PlanCandidate& candidate);

// The plan for a card of `card_bytes` from the sweep in `sweep_dir` (sweep_report.h's
// read_sweep). `overhead`: nullopt = measured by a CUDA sweep, or cards.h's
// kOutsideAllocatorBytes.
// Throws UserError when no setting fits, naming the smallest card that would fit one.
// With `card` (its memory is card_bytes): the peaks are the card's, by replay, and a sweep that did
// not run on CUDA is ranked by the estimated images/s on that card, never by its own device's.
// With `target_batch` (> 0): candidates for that effective batch only (Plan::target_batch);
// UserError naming --target-batch when no measured batch divides it.
Plan make_plan(const std::filesystem::path& sweep_dir, int64_t card_bytes, double headroom,
               std::optional<int64_t> overhead, const std::optional<Card>& card = std::nullopt,
               int64_t target_batch = 0);
// The plan as JSON: the card and, per candidate, its setting, batch, images/s (and their source),
// predicted peak, fits and, with a card, the prediction's fields (card_prediction.h).
nlohmann::ordered_json plan_json(const Plan& plan);

// The table (fastest first, each with why it lost) and the per-setting predictions.
std::string plan_table(const Plan& plan);
// "--set training.batch_size=128 --set training.precision=bf16 ...". A candidate measured with
// per-block checkpointing (auto, or on with granularity block) is recommended with
// checkpointing.enabled=auto and the plan's budget for the allocator: it recomputes only the
// blocks that budget needs, at most all of them, which the sweep measured fitting, so it is at
// least as fast as the candidate measured. Other granularities are recommended as measured.
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
