// The plan's outputs: the table printed, plan.json and the recommended --set flags (plan.h).
#include <fmt/format.h>

#include <cmath>
#include <sstream>

#include "training/cards/alloc_conf.h"
#include "training/cards/speed_model.h"
#include "training/platform/json_rows.h"
#include "training/platform/memory.h"
#include "training/platform/statistics.h"
#include "training/studies/plan.h"

namespace training {

namespace {

// The table's last column for candidate `i`.
std::string verdict_of(const Plan& plan, size_t i) {
  const auto& c = plan.candidates[i];
  if (i == *plan.chosen) {
    if (!c.speed_not_estimated.empty()) {
      return "**recommended** (no candidate that fits has a speed: " + c.speed_not_estimated + ")";
    }
    return plan.speed == Plan::Speed::Estimated && !c.speed_why.empty()
               ? "**recommended** (" + c.speed_why + ")"
               : "**recommended**";
  }
  if (!c.unsupported.empty()) return "cannot run: " + c.unsupported;
  if (!c.untrainable.empty()) return "cannot train: " + c.untrainable;
  if (!c.fits && c.every_block_short) {
    return "does not fit, not even with every block recomputed (the least checkpointing auto "
           "holds): " +
           needs_card_text(plan, c);
  }
  if (!c.fits) {
    for (const auto& [setting, largest] : plan.largest_on_card) {
      if (setting == c.setting && c.batch < largest) {
        return fmt::format(
            "does not fit (below the largest batch that fits, {}: fitting is not monotone in the "
            "batch): {}",
            largest, needs_card_text(plan, c));
      }
    }
    return "does not fit: " + needs_card_text(plan, c);
  }
  if (!c.speed_not_estimated.empty())
    return "fits (speed not estimated: " + c.speed_not_estimated + ")";
  if (plan.speed == Plan::Speed::None) {  // ranked by images a step, then by the smaller peak
    const auto& chosen = plan.candidates.at(*plan.chosen);
    const int64_t images = c.batch * c.setting.accumulate_steps;
    if (images < chosen.batch * chosen.setting.accumulate_steps) {
      return "fits (speed not estimated: fewer images a step)";
    }
    return c.predicted_peak > chosen.predicted_peak
               ? "fits (speed not estimated: as many images a step, a larger peak)"
               : "fits (speed not estimated: as many images a step and the same peak; the "
                 "recommended one is listed first)";
  }
  const double fewer =
      100 * (1 - c.images_per_second / plan.candidates.at(*plan.chosen).images_per_second);
  if (fewer < 0.5) return "as fast (within 0.5%; the recommended one is listed first)";
  return fmt::format("slower: {:.0f}% fewer images/s", fewer);
}

// A batch, and where a step of it takes more images than the sweep config's training set, that
// train refuses it (it fits all the same).
std::string batch_text(const Plan& plan, int64_t batch, int64_t accumulate_steps) {
  return std::to_string(batch) + beyond_training_set(batch, accumulate_steps, plan.train_images);
}

}  // namespace

std::string plan_table(const Plan& plan) {
  std::ostringstream out;
  if (plan.card) {
    out << "Card: " << plan.card->name << " (" << format_bytes(plan.card->memory_bytes) << ", "
        << plan.card->memory_source << "). Peaks: this machine's allocation stream replayed "
        << "through the caching allocator's model, options "
        << alloc_conf_label(plan.allocator_options) << " (the reserved peak"
        << (plan.device_resident_bytes > 0
                ? ", with data.device_resident's splits and epoch order, " +
                      format_bytes(plan.device_resident_bytes)
                : std::string())
        << "). Images/s: " << plan.speed_source << ".\n\n";
  } else {
    out << "Images/s: " << plan.speed_source << " (a plan for a card you do not have: --card).\n\n";
  }
  out << "Plan for a " << (plan.card ? plan.card->name : byte_size_text(plan.card_bytes)) << " ("
      << format_bytes(plan.card_bytes) << ") card: " << config_yaml::percent_text(plan.headroom)
      << " headroom leaves " << format_bytes(plan.usable_bytes) << "; "
      << format_bytes(plan.overhead_bytes) << " outside the allocator (" << plan.overhead_source
      << ") leaves " << format_bytes(plan.usable_bytes - plan.overhead_bytes)
      << " for the allocator's peak.\n\n"
      << (plan.target_batch > 0
              ? fmt::format(
                    "Target: {} images per optimizer step, as micro-batch x accumulate_steps. A "
                    "batch measured at one micro-batch per step has the accumulated gradients "
                    "({}) added to its peak; images/s is the micro-batch's.\n\n",
                    plan.target_batch, format_bytes(plan.gradient_bytes))
              : "")
      << (plan.sweep_complete
              ? ""
              : "The sweep did not complete (stopped, out of sweep.time_budget, or a find-max "
                "search ended on a trial that failed twice): batches larger than those it "
                "measured may fit; this plan chooses among the measured ones only.\n\n")
      << "| setting | batch | images/s"
      << (plan.speed == Plan::Speed::Estimated ? " (estimated)" : "")
      << " | predicted peak | verdict |\n"
      << "|---|---:|---:|---:|---|\n";
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const auto& c = plan.candidates[i];
    const std::string verdict = verdict_of(plan, i);
    out << "| " << c.setting.name() << " | " << c.batch
        << (c.setting.accumulate_steps > 1 ? " x " + std::to_string(c.setting.accumulate_steps)
                                           : "")
        << " | "
        << (c.unsupported.empty() && plan.speed != Plan::Speed::None &&
                    c.speed_not_estimated.empty()
                ? rate_text(c.images_per_second)
                : "-")
        << " | " << (c.unsupported.empty() ? format_bytes(c.predicted_peak) : "-") << " | "
        << verdict << " |\n";
  }
  if (plan.card) {
    out << "\nLargest batch that fits on " << plan.card->name
        << " per setting (by replay; not measured):\n\n| setting | largest batch |\n|---|---:|\n";
    for (const auto& [cell, batch] : plan.largest_on_card) {
      out << "| " << cell.name() << " | "
          << (batch > 0 ? batch_text(plan, batch, cell.accumulate_steps) : "none") << " |\n";
    }
    return out.str();
  }
  out << "\nLargest batch predicted to fit per setting (the sweep's fit; not measured):\n\n"
      << "| setting | largest batch | fit R² |\n|---|---:|---:|\n";
  for (const auto& cell : plan.cells) {
    const auto& batch = cell.predictions.front().second;
    out << "| " << cell.setting.name() << " | "
        << (!cell.fit && cell.setting.checkpointing == CheckpointMode::Auto
                ? "- (no fit for auto: its recomputed blocks change with the batch)"
            : !cell.fit ? "- (needs two measured batches)"
            : batch     ? batch_text(plan, *batch, cell.setting.accumulate_steps)
                        : "-")
        << " | " << (cell.fit ? fmt::format("{:.4f}", cell.fit->r_squared) : "-") << " |\n";
  }
  return out.str();
}

// A text, or null where there is none.
static nlohmann::ordered_json text_or_null(const std::string& text) {
  return text.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(text);
}

// Why a candidate's images/s is null, as train memory --card says it per setting; "" with a speed.
static std::string no_speed_text(const Plan& plan, const PlanCandidate& c) {
  if (!c.speed_not_estimated.empty() || !plan.card) return c.speed_not_estimated;
  const bool none = plan.speed == Plan::Speed::None || !c.unsupported.empty();
  return none ? speed_unknown(*plan.card, c.setting.precision, /*allow_tf32=*/true) : "";
}

nlohmann::ordered_json plan_json(const Plan& plan) {
  nlohmann::ordered_json candidates = nlohmann::ordered_json::array();
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const auto& c = plan.candidates[i];
    nlohmann::ordered_json row = {{"setting", c.setting.name()}};
    // A setting the card cannot run is neither replayed nor timed: its figures are null.
    const bool runs = c.unsupported.empty();
    auto figure = [&](const nlohmann::ordered_json& value) {
      return runs ? value : nlohmann::ordered_json(nullptr);
    };
    row.update(c.setting.json());
    row.update(nlohmann::ordered_json{
        {"batch_size", c.batch},
        {"effective_batch_size", c.batch * c.setting.accumulate_steps},
        {"images_per_second", plan.speed == Plan::Speed::None || !c.speed_not_estimated.empty()
                                  ? nlohmann::ordered_json()
                                  : figure(c.images_per_second)},
        {"predicted_reserved_peak_bytes", figure(c.predicted_peak)},
        {"predicted_device_bytes", figure(c.predicted_peak + plan.overhead_bytes)},
        {"speed_bound", text_or_null(plan.speed == Plan::Speed::Estimated ? c.speed_why : "")},
        {"speed_not_estimated", text_or_null(no_speed_text(plan, c))},
        {"fits", c.fits},
        // The smallest card it fits, as the verdict says it (null where it fits or cannot run).
        {"needed_card_bytes",
         optional_json(!c.fits && runs ? card_needed_for(plan, c.needed_limit) : std::nullopt)},
        {"needed_card_by_size_bytes",
         optional_json(!c.fits && runs && c.needed_limit_by_size > 0
                           ? card_needed_for(plan, c.needed_limit_by_size)
                           : std::nullopt)},
        {"unsupported", text_or_null(c.unsupported)},
        {"untrainable", text_or_null(c.untrainable)},
        {"recommended", plan.chosen && *plan.chosen == i}});
    if (plan.card) {
      row["card"] = {{"name", plan.card->name}, {"memory_bytes", plan.card->memory_bytes}};
      row["predicted_allocated_peak_bytes"] = figure(c.predicted_allocated);
      row["allocator_options"] = plan.allocator_options;
      row["device_resident_bytes"] = plan.device_resident_bytes > 0
                                         ? nlohmann::ordered_json(plan.device_resident_bytes)
                                         : nlohmann::ordered_json(nullptr);
    }
    candidates.push_back(row);
  }
  // The table's "largest batch" per setting: by replay on a card (--card), else the sweep's fit.
  nlohmann::ordered_json largest = nlohmann::ordered_json::array();
  for (const auto& [cell, batch] : plan.largest_on_card) {
    largest.push_back({{"setting", cell.name()}, {"largest_batch", batch}, {"source", "replay"}});
  }
  if (!plan.card) {
    for (const auto& cell : plan.cells) {
      const auto& batch = cell.predictions.front().second;
      largest.push_back({{"setting", cell.setting.name()},
                         {"largest_batch", cell.fit && batch ? nlohmann::ordered_json(*batch)
                                                             : nlohmann::ordered_json(nullptr)},
                         {"source", "fit"},
                         {"fit_r_squared", cell.fit ? nlohmann::ordered_json(cell.fit->r_squared)
                                                    : nlohmann::ordered_json(nullptr)}});
    }
  }
  const auto target = [&](int64_t value) {  // null without --target-batch
    return plan.target_batch > 0 ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr);
  };
  return {{"card", plan.card ? plan.card->name : byte_size_text(plan.card_bytes)},
          {"memory_bytes", plan.card_bytes},
          {"headroom", plan.headroom},
          {"usable_bytes", plan.usable_bytes},
          {"outside_allocator_bytes", plan.overhead_bytes},
          {"outside_allocator_source", plan.overhead_source},
          {"images_per_second_source", plan.speed_source},
          {"sweep_complete", plan.sweep_complete},
          {"target_batch", target(plan.target_batch)},
          {"accumulated_gradient_bytes", target(plan.gradient_bytes)},
          {"candidates", candidates},
          {"largest_batch_on_card", largest}};
}

std::string recommended_flags(const Plan& plan, const PlanCandidate& c) {
  // Every block recomputed alone (granularity block) is what auto's choice of them all matches;
  // auto then needs the budget the plan allotted.
  Setting setting = c.setting;
  if (setting.checkpointing == CheckpointMode::On && plan.per_block_checkpointing) {
    setting.checkpointing = CheckpointMode::Auto;
  }
  return setting.set_flags(c.batch, plan.target_batch > 0) +
         (setting.checkpointing == CheckpointMode::Auto
              ? " --set checkpointing.budget=" +
                    byte_size_text(plan.usable_bytes - plan.overhead_bytes)
              : "");
}

}  // namespace training
