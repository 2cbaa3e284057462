#include "training/studies/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "models/resnet.h"
#include "training/cards/alloc_conf.h"
#include "training/cards/card_prediction.h"
#include "training/cards/speed_calibration.h"
#include "training/config/config_yaml.h"
#include "training/parts/components.h"
#include "training/parts/setup.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/studies/sweep_report.h"

namespace training {

namespace fs = std::filesystem;

namespace {

// The memory outside the allocator to plan with, and where the figure comes from.
std::pair<int64_t, std::string> plan_overhead(const SweepRecord& sweep,
                                              std::optional<int64_t> given) {
  if (given) return {*given, "--overhead"};
  int64_t measured = 0;
  for (const auto& t : sweep.trials) {
    if (t.result.status == TrialStatus::Ok) {
      measured = std::max(measured, t.result.outside_allocator_bytes);
    }
  }
  if (sweep.cuda && measured > 0) {
    return {measured, "measured on " + sweep.device + " by the sweep's trials"};
  }
  return {kOutsideAllocatorBytes,
          std::string(kOutsideAllocatorSource) + ", assumed: " +
              (sweep.cuda ? "this sweep did not measure it" : "the sweep ran on " + sweep.device) +
              "; --overhead to change"};
}

// The candidate's images/s on the card by the speed model (speed_calibration.h), and why; where
// it cannot be estimated (a graph-captured step), why not.
void estimate_speed(PlanCandidate& c, const Config& config, const Card& card) {
  Config at = config;
  c.setting.apply_to(at);
  try {
    const StepEstimate e = predict_step(at, c.batch, card);
    c.images_per_second = e.images_per_second();
    c.speed_why = e.why();
  } catch (const std::exception& e) {  // no speed on this card for it, said
    c.images_per_second = 0;
    c.speed_not_estimated = e.what();
  }
}

// With a card: each candidate's peaks by replay on it and, for a sweep not run on CUDA, its
// images/s estimated there. `config` is the sweep's. After aim_at_target_batch (accumulating
// candidates replay as they would train).
void apply_card(Plan& plan, const SweepRecord& sweep, const Config& config, int64_t for_allocator) {
  const Card& card = *plan.card;
  const AllocatorOptions options = alloc_conf_from_environment();
  plan.allocator_options = alloc_conf_text(options);
  CardPredictor predictor(config, card, options, std::max<int64_t>(1, for_allocator));
  plan.device_resident_bytes = predictor.held().resident_bytes();
  const bool on_cuda = sweep.cuda;
  // A card given by its size has no data sheet: no speed, never another card's (issue 53).
  plan.speed = on_cuda              ? Plan::Speed::Measured
               : card.sheet.known() ? Plan::Speed::Estimated
                                    : Plan::Speed::None;
  plan.speed_source =
      plan.speed == Plan::Speed::Measured ? "measured on " + sweep.device
      : plan.speed == Plan::Speed::Estimated
          ? "estimated for " + card.name + " by the " + kSpeedModelName + ", not measured"
          : "no data sheet for '" + card.name +
                "': speeds not estimated; ranked by memory "
                "only (the largest batch that fits first)";
  std::vector<Setting> predicted;
  // checkpointing auto's least: every block recomputed alone, replayed with granularity block.
  std::optional<CardPredictor> every_block;
  for (auto& c : plan.candidates) {
    if (c.unsupported = card.unsupported(c.setting.precision); !c.unsupported.empty()) {
      c.fits = false;
      c.images_per_second = 0;  // ranked last
      continue;                 // nothing to predict or estimate
    }
    if (c.setting.unpredictable().empty()) {
      const CardPrediction p = predictor.predict(c.setting, c.batch);
      c.predicted_peak = p.figures().peak_reserved;
      c.predicted_allocated = p.figures().peak_allocated;
      c.fits = p.replay.fits && c.predicted_peak <= for_allocator;
      if (!p.replay.fits) {  // the limit the replay fits under, not its reserved peak there
        c.needed_limit = p.needed_limit;
        if (p.needed_by_size > 0) {
          c.needed_limit_by_size = p.needed_by_size - beside_tensors(Card{}).outside_allocator;
        }
      }
      if (std::find(predicted.begin(), predicted.end(), c.setting) == predicted.end()) {
        predicted.push_back(c.setting);
      }
    } else {  // auto: the sweep's own peak stands where the least auto reaches fits the card
      if (!every_block) {
        Config blocks = config;
        blocks.checkpointing.granularity(CheckpointGranularity::Block);
        every_block.emplace(blocks, card, options, std::max<int64_t>(1, for_allocator));
      }
      Setting least = c.setting;
      least.checkpointing = CheckpointMode::On;
      const CardPrediction p = every_block->predict(least, c.batch);
      if (!p.replay.fits || p.figures().peak_reserved > for_allocator) {
        c.fits = false;
        c.every_block_short = true;
        c.predicted_peak = p.figures().peak_reserved;
        c.predicted_allocated = p.figures().peak_allocated;
        c.needed_limit = p.replay.fits ? p.figures().peak_reserved : p.needed_limit;
      }
    }
    if (plan.speed == Plan::Speed::None) c.images_per_second = 0;
    if (plan.speed == Plan::Speed::Estimated) estimate_speed(c, config, card);
  }
  // After every candidate: at or above each batch of its setting that fits, one figure a setting.
  for (const auto& setting : predicted) {
    plan.largest_on_card.emplace_back(setting, predictor.largest_batch(setting).value_or(0));
  }
}

// Fastest first (measured or estimated images/s); without a speed, by memory: the most images a
// step first, then the smaller peak.
void rank_candidates(Plan& plan) {
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(),
                   [&](const PlanCandidate& a, const PlanCandidate& b) {
                     if (plan.speed != Plan::Speed::None) {
                       const bool a_known = a.speed_not_estimated.empty(),
                                  b_known = b.speed_not_estimated.empty();
                       if (a_known != b_known) return a_known;  // a speed before none
                       return a.images_per_second > b.images_per_second;
                     }
                     const int64_t images_a = a.batch * a.setting.accumulate_steps,
                                   images_b = b.batch * b.setting.accumulate_steps;
                     if (images_a != images_b) return images_a > images_b;
                     return a.predicted_peak < b.predicted_peak;
                   });
}

// --target-batch: each measured trial whose batch divides `target` becomes micro-batch x
// accumulate_steps = target, its peak with the accumulated gradients added (a trial measured
// accumulating holds them already, and stands for every accumulate_steps > 1 of its batch).
void aim_at_target_batch(Plan& plan, int64_t target, int64_t gradients, int64_t for_allocator) {
  std::vector<int64_t> batches;
  for (const auto& c : plan.candidates) batches.push_back(c.batch);
  check_target_batch(target, batches, plan.train_images, "the sweep measured ok");
  const auto measured_accumulating = [&](const PlanCandidate& c) {
    return std::any_of(plan.candidates.begin(), plan.candidates.end(), [&](const auto& other) {
      Setting same = other.setting;
      same.accumulate_steps = 1;
      return other.setting.accumulate_steps > 1 && other.batch == c.batch && same == c.setting;
    });
  };
  std::vector<PlanCandidate> aimed;
  for (const auto& c : plan.candidates) {
    if (target % c.batch != 0 || target / c.batch > kMaxAccumulateSteps) continue;
    const int64_t steps = target / c.batch;
    const bool accumulating = c.setting.accumulate_steps > 1;
    if (accumulating && steps == 1) continue;  // its peak holds gradients one step does not
    if (!accumulating && steps > 1 && measured_accumulating(c)) continue;
    PlanCandidate a = c;
    a.setting.accumulate_steps = steps;
    if (steps > 1 && !accumulating) {
      a.predicted_peak += gradients;
      if (plan.card) a.predicted_allocated += gradients;
      a.fits = a.fits && a.predicted_peak <= for_allocator;
    }
    aimed.push_back(a);
  }
  if (aimed.empty()) {  // only trials measured accumulating divide it, in one step each
    throw UserError("--target-batch: " + std::to_string(target) +
                    " is made only by batches the sweep measured accumulating, which stand for "
                    "more than one micro-batch a step; give a larger target");
  }
  plan.candidates = std::move(aimed);
  plan.target_batch = target;
  plan.gradient_bytes = gradients;
}

// The config beside a sweep is the one it ran: one edited since (its model or image size not what
// sweep.json recorded) would plan, and replay on a card, another step than the one measured.
void check_sweeps_config(const SweepRecord& sweep, const Config& swept, const fs::path& dir) {
  const auto differs = [&](const std::string& key, const std::string& now,
                           const std::string& measured) {
    if (now == measured) return;
    throw UserError((dir / "config.yaml").string() + ": " + key + " is " + now +
                    ", but the sweep measured " + measured + " (" + (dir / "sweep.json").string() +
                    "); the config beside a sweep is the one it ran: restore it, or sweep again");
  };
  differs("model.arch", arch_name(swept.model), sweep.arch);
  differs("model.stem", stem_name(swept.model), sweep.stem);
  differs("data.image_size", std::to_string(swept.data.image_size),
          std::to_string(sweep.image_size));
}

// What a candidate needs: the allocator limit where it does not fit (a replay's own, else its
// peak), and why train refuses it where it takes more images a step than the training set has.
void settle_needs(const Plan& plan, PlanCandidate& c) {
  if (!c.fits && c.needed_limit == 0) c.needed_limit = c.predicted_peak;
  c.untrainable = untrainable_batch(c.batch, c.setting.accumulate_steps, plan.train_images);
}

// Nothing to recommend: where no candidate trains with the sweep's config, that; else the smallest
// the card can run and the card it would need, or where none can run, why.
[[noreturn]] void refuse_nothing_fits(const Plan& plan, const std::string& flag,
                                      const std::string& on) {
  const auto trains = [](const PlanCandidate& c) { return c.untrainable.empty(); };
  const bool some_untrainable =
      !std::all_of(plan.candidates.begin(), plan.candidates.end(), trains);
  int64_t fewest = std::numeric_limits<int64_t>::max();
  for (const auto& c : plan.candidates)
    fewest = std::min(fewest, c.batch * c.setting.accumulate_steps);
  refuse_too_few_images(fewest, plan.train_images, flag, "measured setting");
  const auto& smallest = *std::min_element(
      plan.candidates.begin(), plan.candidates.end(), [](const auto& a, const auto& b) {
        return std::make_tuple(!a.untrainable.empty(), !a.unsupported.empty(), a.needed_limit) <
               std::make_tuple(!b.untrainable.empty(), !b.unsupported.empty(), b.needed_limit);
      });
  if (!smallest.unsupported.empty()) {
    throw UserError(flag + ": no measured setting can run on " + on + ": " + smallest.unsupported);
  }
  // On a card given by its size (other cuBLAS workspaces) another candidate may be the smallest.
  const PlanCandidate* by_size = &smallest;
  for (const auto& c : plan.candidates) {
    if (c.untrainable.empty() == smallest.untrainable.empty() && c.needed_limit_by_size > 0 &&
        c.needed_limit_by_size < by_size->needed_limit_by_size) {
      by_size = &c;
    }
  }
  throw UserError(flag + ": no measured setting " +
                  (some_untrainable ? "that the sweep's config trains " : "") + "fits in " + on +
                  "; the smallest, " + smallest.setting.name() + " at batch " +
                  std::to_string(smallest.batch) + ", " + needs_card_text(plan, smallest, by_size));
}

// What a card leaves after its headroom, rounded down: one formula for the plan and for the card
// it advises, which is then read back with it.
int64_t usable_of(int64_t card_bytes, double headroom) {
  return static_cast<int64_t>(static_cast<double>(card_bytes) * (1 - headroom));
}

}  // namespace

void refuse_too_few_images(int64_t fewest, int64_t train_images, const std::string& flag,
                           const std::string& what) {
  if (train_images <= 0 || fewest <= train_images) return;
  throw UserError(flag + ": every " + what + " takes more images a step (the fewest: " +
                  std::to_string(fewest) + ") than the " + std::to_string(train_images) +
                  " training images of the sweep's config, which train refuses; sweep smaller "
                  "batches (--batch-sizes)");
}

std::string plan_target_text(const std::optional<Card>& card, int64_t card_bytes, double headroom,
                             int64_t overhead) {
  return (card ? card->name : byte_size_text(card_bytes)) + " (" + format_bytes(card_bytes) +
         ") with " + config_yaml::percent_text(headroom) + " headroom and " +
         format_bytes(overhead) + " outside the allocator";
}

void refuse_no_room(const std::optional<Card>& card, int64_t card_bytes, double headroom,
                    int64_t overhead, const Config* grid) {
  const int64_t share = usable_of(card_bytes, headroom) - overhead;
  std::string held = share > 0 ? "" : "that leaves the allocator no memory";
  if (share > 0 && grid) {  // refused where no precision of the grid fits: the first one's line
    for (const Precision precision : grid->sweep.precisions) {
      Config at = *grid;
      at.training.precision = precision;
      const std::string one =
          weights_alone_remedy(at, share, "a larger card", nullptr, "sweep.precisions [fp32]");
      if (one.empty()) return;
      if (held.empty()) held = one;
    }
  }
  if (held.empty()) return;
  throw UserError(std::string(card ? "--card" : "--memory") + ": nothing fits in " +
                  plan_target_text(card, card_bytes, headroom, overhead) + ": " + held);
}

std::optional<int64_t> card_needed_for(const Plan& plan, int64_t limit) {
  const int64_t wanted = limit + plan.overhead_bytes;
  const double at_least = std::ceil(static_cast<double>(wanted) / (1 - plan.headroom));
  if (at_least > static_cast<double>(kLargestCard)) return std::nullopt;
  int64_t card = (static_cast<int64_t>(at_least) + kMiB - 1) / kMiB * kMiB;
  while (usable_of(card, plan.headroom) < wanted) card += kMiB;  // as make_plan reads it back
  if (card > kLargestCard) return std::nullopt;
  return card;
}

std::string needs_card_text(const Plan& plan, const PlanCandidate& c,
                            const PlanCandidate* by_size) {
  const auto card = card_needed_for(plan, c.needed_limit);
  if (!card) {
    return "needs a card above " + byte_size_text(kLargestCard) +
           ", the largest --card and --memory take, at " +
           config_yaml::percent_text(plan.headroom) + " headroom";
  }
  std::string text = "needs a card of at least " + byte_size_text(*card);
  if (!by_size) by_size = &c;
  const int64_t size_card = by_size->needed_limit_by_size > 0
                                ? card_needed_for(plan, by_size->needed_limit_by_size).value_or(0)
                                : 0;
  if (size_card > 0) {  // --card takes no larger size
    text += " (a card given by its size, with cuBLAS workspaces of " +
            format_bytes(beside_tensors(Card{}).cublas_workspace) + ": --card " +
            byte_size_text(size_card) +
            (by_size != &c ? ", for " + by_size->setting.name() + " at batch " +
                                 std::to_string(by_size->batch)
                           : "") +
            ")";
  }
  return text;
}

Plan make_plan(const fs::path& sweep_dir, int64_t card_bytes, double headroom,
               std::optional<int64_t> overhead, const std::optional<Card>& card,
               int64_t target_batch) {
  const SweepRecord sweep = read_sweep(sweep_dir);
  Plan plan;
  plan.card = card;
  plan.card_bytes = card_bytes;
  plan.headroom = headroom;
  plan.usable_bytes = usable_of(card_bytes, headroom);
  std::tie(plan.overhead_bytes, plan.overhead_source) = plan_overhead(sweep, overhead);
  if (card && !overhead && !sweep.cuda) {
    const BesideTensors beside = beside_tensors(*card);
    plan.overhead_bytes = beside.outside_allocator;
    plan.overhead_source = beside.outside_source;
  }
  plan.speed_source = "measured on " + sweep.device;
  // The sweep's config, read once: its checkpointing granularity, its model's smallest batch that
  // trains, and its gradient bytes and setting for a target batch and a card.
  const Config swept = load_config((sweep_dir / "config.yaml").string(), {}, ConfigRead::Record);
  check_sweeps_config(sweep, swept, sweep_dir);
  plan.per_block_checkpointing = swept.checkpointing.granularity() == CheckpointGranularity::Block;
  const int64_t smallest_batch =
      models::smallest_trainable_batch(swept.model, swept.data.image_size);
  plan.sweep_complete = sweep.complete;
  const int64_t for_allocator = plan.usable_bytes - plan.overhead_bytes;
  const std::string flag = card ? "--card" : "--memory";
  const std::string on = plan_target_text(card, card_bytes, headroom, plan.overhead_bytes);
  if (card) refuse_no_room(card, card_bytes, headroom, plan.overhead_bytes);  // known unreplayed
  plan.cells = summarize(sweep.cells, sweep.trials, {std::max<int64_t>(0, for_allocator)},
                         /*searched=*/false, smallest_batch);
  for (const auto& t : sweep.trials) {
    if (t.result.status != TrialStatus::Ok) continue;
    // Measured peaks; a card's replay replaces them (not auto's, held under the sweep's budget).
    const auto& r = t.result;
    PlanCandidate c;
    c.setting = t.setting;
    c.batch = t.batch;
    c.images_per_second = r.images_per_second.value_or(0);  // an ok trial's: measured
    c.predicted_peak = r.peak_reserved_bytes;
    c.predicted_allocated = r.peak_allocated_bytes;
    for (const auto& summary : plan.cells) {
      if (summary.setting == t.setting && summary.fit) {
        c.predicted_peak = std::max(c.predicted_peak,
                                    static_cast<int64_t>(std::ceil(summary.fit->predict(t.batch))));
      }
    }
    c.fits = c.predicted_peak <= for_allocator;
    plan.candidates.push_back(c);
  }
  plan.train_images = train_images_at_most(swept.data);
  if ((card || target_batch > 0) && !plan.candidates.empty()) {
    const int64_t gradients = gradient_bytes(swept.model);
    if (target_batch > 0) aim_at_target_batch(plan, target_batch, gradients, for_allocator);
    if (card) apply_card(plan, sweep, swept, for_allocator);
  }
  if (plan.candidates.empty()) {
    throw UserError(sweep_dir.string() +
                    ": no trial of this sweep was measured ok; nothing to plan from");
  }
  for (auto& c : plan.candidates) settle_needs(plan, c);
  rank_candidates(plan);
  for (size_t i = 0; i < plan.candidates.size() && !plan.chosen; ++i) {
    if (plan.candidates[i].fits && plan.candidates[i].untrainable.empty()) plan.chosen = i;
  }
  if (!plan.chosen) refuse_nothing_fits(plan, flag, on);
  return plan;
}

}  // namespace training
