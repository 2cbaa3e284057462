#include "training/parts/checkpoint_choice.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "training/config/config_yaml.h"
#include "training/parts/components.h"
#include "training/parts/memory_format.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"
#include "training/platform/heartbeat.h"
#include "training/platform/memory.h"
#include "training/platform/statistics.h"
#include "training/step/recompute.h"
#include "training/step/step.h"

namespace training {

namespace {

// Whether a larger checkpointing.budget is the remedy: given, and within memory.limit (which
// the budget may not pass) the step with every block recomputed needs `needed`.
bool budget_stands_in_the_way(const Config& config, std::optional<int64_t> needed) {
  return config.checkpointing.budget() > 0 && needed &&
         (config.memory.limit <= 0 || *needed <= config.memory.limit);
}

// What would fit when the step with every block recomputed needs `needed` bytes (nullopt: it ran
// out under the limit): a checkpointing.budget of at least that where one was given; a smaller
// checkpointing.headroom where the memory holds it; else more memory.
std::string more_budget(const Config& config, const torch::Device& device,
                        std::optional<int64_t> needed) {
  if (budget_stands_in_the_way(config, needed)) {  // within memory.limit, which it may not pass
    return fmt::format(
        "a checkpointing.budget of at least {} (every block recomputed needs {} with what the "
        "run holds beside the step)",
        size_at_least_text(*needed, config.memory.limit), format_bytes(*needed));
  }
  if (!needed || config.checkpointing.budget() > 0) return "more memory";
  // As checkpointing_budget takes the budget: memory * (1 - headroom) - outside.
  const bool card = device.is_cuda() && config.memory.limit <= 0;
  const int64_t memory = card ? total_memory(device) : config.memory.limit;
  const int64_t outside = card ? memory_outside_allocator(device) : 0;
  if (memory <= 0 || *needed + outside > memory) return "more memory";
  // The most headroom that leaves `needed`, rounded down to 0.1% (never past it).
  const double most = 1 - static_cast<double>(*needed + outside) / static_cast<double>(memory);
  return fmt::format(
      "checkpointing.headroom at most {:.1f}% (now {}: every block recomputed needs {} of {}{} "
      "with what the run holds beside the step), or more memory",
      std::max(0.0, std::floor(most * 1000 - 1e-9) / 10),
      config_yaml::percent_text(config.checkpointing.headroom()), format_bytes(*needed),
      card ? "the card's " : "memory.limit ", format_bytes(memory));
}

// What lowers the smallest peak, or widens the budget, when nothing fits within `budget`. Where
// the weights, their gradients and momentum alone take more, no batch or precision helps (and
// with a given budget the memory they need is that budget's).
std::string remedies(const Config& config, const torch::Device& device, int64_t budget,
                     std::optional<int64_t> needed) {
  const std::string more =
      budget_stands_in_the_way(config, needed) ? "a larger checkpointing.budget" : "more memory";
  if (std::string held = weights_alone_remedy(config, budget, more); !held.empty()) return held;
  const std::string smaller = step_remedies(config, budget);
  return (smaller.empty() ? "" : smaller.substr(2) + ", or ") + more_budget(config, device, needed);
}

// The config whose remedies "nothing fits" says: `config`, or at the smallest batch that trains
// where a step there, every block recomputed, does not fit `budget` either (no smaller batch is
// then advised: what a step holds whatever the batch, e.g. a convolution's weight-gradient scratch
// beside the weights, may not fit). Measured, where the run ends anyway.
Config remedied(const Config& config, const torch::Device& device, const MeasureBlocks& measure,
                int64_t budget) {
  if (!smaller_batch_trains(config)) return config;
  Config smallest = config;
  smallest.training.batch_size =
      models::smallest_trainable_batch(config.model, config.data.image_size);
  try {
    const bool fits =
        choose_blocks(measure ? measure(smallest, device) : measure_blocks(smallest, device),
                      budget)
            .fits;
    return fits ? config : smallest;
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e) && !dynamic_cast<const OutOfMemory*>(&e)) throw;
    return smallest;
  }
}

// Whether the recorded choice `c` holds for this run (its step, and its peak within this run's
// budget); kept, it is checked against that budget from now on. `why`: why it does not. A run with
// no budget (memory.limit taken away on the CPU) is refused as a fresh one is.
bool recorded_choice_holds(CheckpointingDecision& c, const Config& config,
                           const torch::Device& device, int64_t beside_step, std::string* why) {
  int64_t budget = checkpointing_budget(config, device).bytes - beside_step;
  // The card's budget (no memory.limit or budget given) is its memory less what lies outside the
  // allocator, which before this run's first step lacks what cuBLAS and cuDNN take once a step
  // has run, as the recorded budget (taken after its measurement, on this card: chosen_for names
  // it) had: the smaller of the two is this run's.
  if (device.is_cuda() && config.memory.limit <= 0 && config.checkpointing.budget() <= 0)
    budget = std::min(budget, c.budget);
  const std::string step = step_signature(config, device);
  if (c.chosen_for != step) {
    *why = "it was chosen for " + c.chosen_for + ", and this run is " + step;
  } else if (c.predicted_peak > budget) {
    const auto [peak, allowed] = format_bytes_apart(c.predicted_peak, budget);
    *why = "its predicted peak " + peak + " is above this run's budget " + allowed;
  } else if (c.cheaper_from > 0 && budget >= c.cheaper_from) {
    const auto [now, from] = format_bytes_apart(budget, c.cheaper_from);
    *why = "this run's budget " + now + " holds a cheaper choice (from " + from + ")";
  }
  if (!why->empty()) return false;
  std::tie(c.budget, c.beside_bytes) = std::pair(budget, beside_step);
  return true;
}

}  // namespace

CheckpointBudget checkpointing_budget(const Config& config, const torch::Device& device) {
  const auto& c = config.checkpointing;
  // Named too: less what the run holds beside the step, it is written apart from it (149.998 MiB,
  // "checkpointing.budget less 2.00 KiB"; it read "150.00 MiB").
  if (c.budget() > 0) return {c.budget(), "checkpointing.budget", c.budget()};
  const double keep = 1 - c.headroom();
  const std::string headroom = "checkpointing.headroom " + config_yaml::percent_text(c.headroom());
  if (config.memory.limit > 0) {
    return {static_cast<int64_t>(static_cast<double>(config.memory.limit) * keep),
            "memory.limit " + format_bytes(config.memory.limit) + " less " + headroom,
            config.memory.limit};
  }
  missing_budget(config, device, "checkpointing.enabled");  // throws on the CPU
  const int64_t card = total_memory(device), outside = memory_outside_allocator(device);
  return {static_cast<int64_t>(static_cast<double>(card) * keep) - outside,
          "the card's " + format_bytes(card) + " less " + headroom + " and " +
              format_bytes(outside) + " outside the allocator",
          card};
}

std::optional<std::pair<std::vector<std::string>, int64_t>> auto_blocks(
    const Config& config, const Decisions& decisions) {
  if (config.checkpointing.mode() != CheckpointMode::Auto) return std::nullopt;
  if (decisions.checkpointing) {
    return std::pair{decisions.checkpointing->blocks, decisions.checkpointing->predicted_peak};
  }
  return std::pair{config.checkpointing.blocks().value_or(std::vector<std::string>{}), int64_t{0}};
}

std::string missing_budget(const Config& config, const torch::Device& device, const char* key) {
  if (!device.is_cpu() || config.memory.limit > 0 || config.checkpointing.budget() > 0) return "";
  const std::string missing =
      "needs a memory budget, and on the CPU there is no card to take it from: set memory.limit "
      "(--set memory.limit=2GiB, which every command takes) or checkpointing.budget";
  if (key) throw KeyError(key, "auto " + missing, {"memory.limit", "checkpointing.budget"});
  return missing;
}

std::pair<std::string, std::string> peak_and_budget_text(int64_t peak, int64_t budget,
                                                         int64_t named) {
  auto texts = format_bytes_apart(peak, budget);
  if (named > 0 && named != budget && texts.second == format_bytes(named))
    texts.second = format_bytes_apart(budget, named).first;
  return texts;
}

std::string budget_text(const CheckpointingDecision& decision, int64_t named) {
  return peak_and_budget_text(decision.predicted_peak, decision.budget, named).second;
}

std::string describe_choice(const CheckpointChoice& c) {
  const std::string blocks = config_yaml::join(c.blocks, ", ");
  const auto [peak, budget_bytes] = peak_and_budget_text(
      c.blocks.empty() ? c.plain_peak : c.predicted_peak, c.budget, c.budget_named);
  const std::string budget = "budget " + budget_bytes + " (" + c.budget_source + ")";
  if (c.blocks.empty()) {
    return budget + ": nothing recomputed, the plain step's predicted peak " + peak + " fits";
  }
  // The plain and the smallest peak beside the chosen one: never written alike where they differ.
  const auto peaks = format_bytes_apart({c.predicted_peak, c.plain_peak, c.smallest_peak});
  return budget + fmt::format(
                      ": recompute {} ({} block{}): predicted peak {} (plain {}, every block "
                      "recomputed {}), {:.0f} ms added to a step (every block: {:.0f} ms)",
                      blocks, c.blocks.size(), c.blocks.size() == 1 ? "" : "s", peak, peaks[1],
                      peaks[2], 1000 * c.extra_seconds, 1000 * c.all_extra_seconds);
}

// checkpointing auto: the choice made now, the one recorded (a resume), or the blocks given.
void log_checkpointing_choice(const Config& config, const Decisions& decisions,
                              const std::optional<CheckpointChoice>& choice) {
  const auto& c = config.checkpointing;
  if (c.mode() != CheckpointMode::Auto) return;
  if (choice) {
    if (!choice->note.empty()) spdlog::info("checkpointing auto: {}", choice->note);
    spdlog::info("checkpointing auto: {}", describe_choice(*choice));
    spdlog::debug("checkpointing auto: {}", describe_measurement(*choice));
    return;
  }
  const auto& blocks = decisions.checkpointing ? decisions.checkpointing->blocks
                                               : c.blocks().value_or(std::vector<std::string>{});
  spdlog::info("checkpointing auto: {}: {}",
               decisions.checkpointing ? "the run's recorded choice, not measured again"
                                       : "the blocks checkpointing.blocks gives",
               blocks.empty() ? std::string("no block recomputed")
                              : "recompute " + config_yaml::join(blocks, ", "));
}

std::string describe_measurement(const CheckpointChoice& c) {
  const auto& m = c.measurement;
  std::string text =
      fmt::format("measured in {:.1f} s; per block: kept bytes, recomputation", m.seconds);
  for (const auto& block : m.blocks) {
    const bool chosen = std::find(c.blocks.begin(), c.blocks.end(), block.name) != c.blocks.end();
    text +=
        fmt::format("\n  {:<10} {:>12} {:>9.1f} ms{}", block.name, format_bytes(block.kept_bytes),
                    1000 * block.recompute_seconds, chosen ? "  recomputed" : "");
  }
  text += "\nper window of the step with every block recomputed: peak, blocks before it";
  for (const auto& window : m.windows) {
    text += fmt::format("\n  {:<34} {:>12} {:>3}", window.name, format_bytes(window.peak),
                        window.blocks_before);
  }
  return text;
}

std::string checkpointing_outcome(const std::optional<CheckpointingDecision>& decision,
                                  int64_t measured_peak, bool* exceeded, int64_t named) {
  if (exceeded) *exceeded = false;
  if (!decision || decision->predicted_peak <= 0 || decision->budget <= 0) return "";
  const auto& c = *decision;
  // The run's peak holds what the run holds beside the step too: compared with both.
  const int64_t predicted = c.predicted_peak + c.beside_bytes, allowed = c.budget + c.beside_bytes;
  const std::string beside =
      c.beside_bytes > 0 ? " and the " + format_bytes(c.beside_bytes) + " beside the step" : "";
  // The measured and predicted peaks: never written alike where they differ from each other or
  // the budget ("predicted 155.10 MiB: within the budget of 155.10 MiB", 4,181 bytes apart); the
  // budget as the choice's line wrote it ("149.999 MiB" there was "150.00 MiB" here, and
  // "150.00 MiB" there "150.000 MiB" here).
  std::vector<int64_t> sizes = {measured_peak, predicted, c.budget, c.predicted_peak};
  if (named > 0) sizes.push_back(named);
  const auto texts = format_bytes_apart(sizes);
  const std::string budget = "the budget of " + budget_text(c, named) + beside;
  if (measured_peak <= allowed) {
    return "measured training peak " + texts[0] + ", predicted " + texts[1] + ": within " + budget;
  }
  if (exceeded) *exceeded = true;
  return "the measured training peak " + texts[0] + " exceeds " + budget + " by " +
         format_bytes(measured_peak - allowed) + " (predicted " + texts[1] + ")";
}

std::string step_signature(const Config& config, const torch::Device& device) {
  return step_signature(config, memory_format_for(config, device), device);
}

std::optional<CheckpointChoice> resolve_checkpointing(const Config& config, Decisions& decisions,
                                                      const torch::Device& device,
                                                      bool data_parallel,
                                                      const MeasureBlocks& measure,
                                                      int64_t beside_step) {
  const auto& c = config.checkpointing;
  auto& recorded = decisions.checkpointing;
  if (c.mode() != CheckpointMode::Auto || c.blocks()) {  // not auto, or given by hand
    recorded.reset();
    return std::nullopt;
  }
  std::string note;
  if (recorded) {
    std::string lapsed;
    if (recorded_choice_holds(*recorded, config, device, beside_step, &lapsed)) return std::nullopt;
    note = "the recorded choice does not hold (" + lapsed + ")";
    if (data_parallel) {
      throw KeyError("checkpointing.enabled",
                     "auto: " + note +
                         ", and with data parallelism it is not chosen again (each rank would "
                         "choose its own): give the blocks as checkpointing.blocks (a one-rank "
                         "run of this step records its choice in decisions.json)");
    }
    note += ": chosen again";
    recorded.reset();
  }
  if (data_parallel) {
    throw KeyError("checkpointing.enabled",
                   "auto measures its choice in one process, and each rank would choose its own; "
                   "with data parallelism give the choice as checkpointing.blocks (a one-rank "
                   "run's decisions.json holds it)");
  }
  checkpointing_budget(config, device);  // refused before measuring when there is none
  BlockMeasurement m;
  try {
    m = measure ? measure(config, device) : measure_blocks(config, device);
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e) || dynamic_cast<const OutOfMemory*>(&e)) throw;  // worded already
    const int64_t budget = checkpointing_budget(config, device).bytes;
    throw OutOfMemory(
        "checkpointing.enabled: auto: one step at batch " +
        std::to_string(config.training.batch_size) +
        " with every block recomputed ran out of memory while it was measured (" + error_line(e) +
        "); nothing fits: " +
        remedies(remedied(config, device, measure, budget), device, budget, std::nullopt));
  }
  // After the measurement: on CUDA, what lies outside the allocator now includes the cuBLAS and
  // cuDNN workspaces the step created.
  CheckpointBudget budget = checkpointing_budget(config, device);
  if (beside_step > 0) {
    budget.bytes -= beside_step;
    budget.source +=
        " less " + format_bytes(beside_step) +
        " the run holds beside the step (its loader's batches and epoch order, device-resident "
        "data)";
  }
  CheckpointChoice choice = choose_blocks(m, budget.bytes);
  choice.budget_source = budget.source;
  choice.budget_named = budget.named;
  choice.note = note;
  if (!choice.fits) {
    const auto [peak, allowed] =
        peak_and_budget_text(choice.smallest_peak, budget.bytes, budget.named);
    throw OutOfMemory("checkpointing.enabled: auto: nothing fits the budget of " + allowed + " (" +
                      budget.source + "): with every block recomputed one step at batch " +
                      std::to_string(config.training.batch_size) + " peaks at " + peak + "; " +
                      remedies(remedied(config, device, measure, budget.bytes), device,
                               budget.bytes, choice.smallest_peak + beside_step));
  }
  recorded = CheckpointingDecision{choice.blocks,
                                   step_signature(config, device),
                                   budget.bytes,
                                   choice.predicted_peak,
                                   std::round(10000 * choice.extra_seconds) / 10,  // to 0.1 ms
                                   beside_step};
  recorded->cheaper_from = cheaper_budget(m, choice);
  return choice;
}

}  // namespace training
