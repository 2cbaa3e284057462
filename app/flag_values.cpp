#include "app/flag_values.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "training/cards/alloc_conf.h"
#include "training/cards/cards.h"
#include "training/config/config_yaml.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/run/output_file.h"

namespace app {

namespace fs = std::filesystem;
using training::UserError;

namespace {

using training::config_yaml::trimmed;

// "10%" or "0.1": the share of the card to keep free, in [0, 1).
double headroom_flag(const std::string& text) {
  const std::string expected =
      "--headroom: expected the share of the card to keep free, below 100%, e.g. 10% or 0.1; "
      "got '" +
      text + "'";
  const std::optional<double> value =
      training::config_yaml::real_number(trimmed(text), /*percent=*/true);
  if (!value || *value < 0 || *value >= 1) throw UserError(expected);
  return *value;
}

// A size at most the largest card's; a bare number is offered the forms in (above, at_most].
int64_t card_size_flag(const std::string& flag, const std::string& text, int64_t above = 0,
                       int64_t at_most = training::kLargestCard) {
  const std::string bare = training::no_unit_refusal(trimmed(text), above, at_most);
  if (!bare.empty()) throw UserError(flag + ": " + bare);
  const int64_t bytes = training::size_flag(flag, text);
  if (bytes > training::kLargestCard) {
    throw UserError(flag + ": expected at most 1024TiB (the largest card), got '" + text + "'");
  }
  return bytes;
}

// --json replaces only an earlier plan, in an existing folder outside other commands' outputs and
// this plan's small sweep's (`output_dir`).
void check_json_output(const std::string& path, const std::string& output_dir) {
  if (path.empty()) return;
  training::check_file_outside_own_output(path, "--json", output_dir);
  const auto a_plan = [](const fs::path& file) {
    return training::json_file_where(file, [](const nlohmann::json& j) {
      return j.is_object() && j.contains("candidates") && j.contains("images_per_second_source");
    });
  };
  training::check_output_file(path, "--json", a_plan, "a plan written by `train plan`");
}

}  // namespace

training::PlanRequest plan_request(const PlanFlags& flags, training::PlanRequest request) {
  if (flags.memory.empty() == flags.card.empty()) {
    throw UserError(
        "plan: expected one of --memory SIZE (e.g. 12GiB) or --card NAME (e.g. "
        "A100-40GB, or 24GiB)");
  }
  // A bare number is offered only the sizes a plan has room on: a card above what lies outside
  // its allocator (--overhead as given where it reads, else 771 MiB) once the headroom is taken,
  // and an overhead below the card's memory.
  request.headroom = headroom_flag(flags.headroom);
  std::optional<int64_t> beside;
  try {
    if (!flags.overhead.empty()) beside = training::parse_byte_size(trimmed(flags.overhead));
  } catch (const std::invalid_argument&) {  // --overhead's own refusal, below
  }
  const auto room = static_cast<int64_t>(
      std::ceil(static_cast<double>(beside.value_or(training::kOutsideAllocatorBytes)) /
                (1 - request.headroom)));
  // Found once: --overhead, where it reads (it is refused below otherwise), replaces 771 MiB.
  if (!flags.card.empty()) request.card = training::find_card(flags.card, beside, request.headroom);
  request.memory =
      request.card ? request.card->memory_bytes : card_size_flag("--memory", flags.memory, room);
  if (!flags.overhead.empty())
    request.overhead = card_size_flag("--overhead", flags.overhead, 0, request.memory - 1);
  if (request.card) training::alloc_conf_from_environment();  // refused before the small sweep
  check_json_output(request.json, request.output_dir);
  if (!flags.target_batch.empty() &&
      (!training::config_yaml::decimal_integer(YAML::Node(trimmed(flags.target_batch)),
                                               request.target_batch) ||
       request.target_batch < 1)) {
    throw UserError(
        "--target-batch: expected images per optimizer step, a whole number >= 1, got '" +
        flags.target_batch + "'");
  }
  if (request.budget_seconds < 1 || request.budget_seconds > training::kMaxTimeBudget) {
    throw UserError(
        "--budget: expected seconds from 1 to " + std::to_string(training::kMaxTimeBudget) +
        " (7 days, as sweep.time_budget), got " + std::to_string(request.budget_seconds));
  }
  if (!request.from.empty() && !request.config_path.empty()) {
    throw UserError("--config: not used with --from (the sweep's config is " +
                    (fs::path(request.from) / "config.yaml").string() + "); give one of them");
  }
  if (request.from.empty() && request.config_path.empty()) {
    throw UserError(
        "plan: expected --from SWEEP_DIR (a sweep to reuse) or --config FILE (to run a small "
        "sweep first)");
  }
  return request;
}

}  // namespace app
