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

// A size with its unit ("24" was 24 bytes), at most the largest card's, offering `unit` (GiB for a
// card, MiB beside the allocator) where that is within the largest card, else bytes.
int64_t size_with_unit(const std::string& flag, const std::string& text, const char* unit) {
  // A bare 0 is no size at all: size_flag says so, rather than offer 0GiB.
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos &&
      text.find_first_not_of('0') != std::string::npos) {
    bool in_unit = true;
    try {
      in_unit = training::parse_byte_size(text + unit) <= training::kLargestCard;
    } catch (const std::invalid_argument&) {
      in_unit = false;
    }
    throw UserError(flag + ": '" + text + "' has no unit; give one, e.g. " + text +
                    (in_unit ? unit : "B"));
  }
  const int64_t bytes = training::size_flag(flag, text, /*bare_bytes=*/false);
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
  if (!flags.overhead.empty())
    request.overhead = size_with_unit("--overhead", flags.overhead, "MiB");
  if (!flags.card.empty()) {
    request.card =
        training::find_card(flags.card, request.overhead);  // --overhead replaces 771 MiB
    request.memory = request.card->memory_bytes;
    training::alloc_conf_from_environment();  // refused before the small sweep runs
  } else {
    request.memory = size_with_unit("--memory", flags.memory, "GiB");
  }
  check_json_output(request.json, request.output_dir);
  request.headroom = headroom_flag(flags.headroom);
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
