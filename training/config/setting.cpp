#include "training/config/setting.h"

#include <fmt/format.h>

#include <set>
#include <sstream>
#include <stdexcept>

#include "training/platform/json_rows.h"
#include "training/step/amp.h"

namespace training {

std::string Setting::name() const {
  return std::string(precision_name(precision)) + " / checkpointing " +
         checkpointing_setting_name(checkpointing) + " / " + memory_format_name(memory_format) +
         (accumulate_steps > 1 ? " / " + std::to_string(accumulate_steps) + " micro-batches" : "");
}

std::string Setting::label() const {
  std::string label = precision_name(precision);
  if (checkpointing == CheckpointMode::On) label += "+checkpointing";
  if (checkpointing == CheckpointMode::Auto) label += "+checkpointing=auto";
  if (memory_format == c10::MemoryFormat::ChannelsLast) label += "+channels_last";
  return label;
}

std::optional<Setting> Setting::parse(const std::string& label) {
  if (label.empty() || label.back() == '+') return std::nullopt;
  std::istringstream in(label);
  std::string part;
  std::getline(in, part, '+');
  Setting setting;
  const auto precision = precision_named(part);
  if (!precision) return std::nullopt;
  setting.precision = *precision;
  std::set<std::string> seen;
  while (std::getline(in, part, '+')) {
    if (!seen.insert(part).second) return std::nullopt;
    if (part == "checkpointing" || part == "checkpointing=auto") {
      if (setting.checkpointing != CheckpointMode::Off) return std::nullopt;
      setting.checkpointing = part == "checkpointing" ? CheckpointMode::On : CheckpointMode::Auto;
    } else if (part == "channels_last") {
      setting.memory_format = c10::MemoryFormat::ChannelsLast;
    } else {
      return std::nullopt;
    }
  }
  return setting;
}

nlohmann::ordered_json Setting::json() const {
  return {{"precision", precision_name(precision)},
          {"checkpointing", checkpointing == CheckpointMode::Auto
                                ? nlohmann::ordered_json("auto")
                                : nlohmann::ordered_json(checkpointing == CheckpointMode::On)},
          {"memory_format", memory_format_name(memory_format)},
          {"accumulate_steps", accumulate_steps}};
}

Setting Setting::from_json(const nlohmann::json& json) {
  Setting setting;
  const auto precision = read_as<std::string>(json, "precision");
  const auto format = read_as<std::string>(json, "memory_format");
  if (!precision_named(precision)) {
    throw std::invalid_argument("precision: '" + precision + "' is not fp32, bf16 or fp16");
  }
  if (!memory_format_named(format)) {
    throw std::invalid_argument("memory_format: '" + format +
                                "' is not contiguous or channels_last");
  }
  setting.precision = *precision_named(precision);
  setting.memory_format = *memory_format_named(format);
  const auto checkpointing = read_as<nlohmann::json>(json, "checkpointing");
  if (checkpointing.is_string() && checkpointing.get<std::string>() == "auto") {
    setting.checkpointing = CheckpointMode::Auto;
  } else {
    setting.checkpointing =
        read_as<bool>(json, "checkpointing") ? CheckpointMode::On : CheckpointMode::Off;
  }
  setting.accumulate_steps = read_as<int64_t>(json, "accumulate_steps");
  if (setting.accumulate_steps < 1) throw std::invalid_argument("accumulate_steps below 1");
  return setting;
}

void Setting::apply_to(Config& config) const {
  config.training.precision = precision;
  config.training.memory_format = memory_format;
  config.checkpointing.mode(checkpointing);
  config.training.accumulate_steps = accumulate_steps;
}

std::string Setting::set_flags(int64_t batch, bool accumulation_always) const {
  return fmt::format(
      "--set training.batch_size={} --set training.precision={} --set training.memory_format={} "
      "--set checkpointing.enabled={}{}",
      batch, precision_name(precision), memory_format_name(memory_format),
      checkpointing_setting_name(checkpointing),
      accumulate_steps > 1 || accumulation_always
          ? " --set training.accumulate_steps=" + std::to_string(accumulate_steps)
          : "");
}

std::string Setting::unpredictable(bool sweep) const {
  if (checkpointing != CheckpointMode::Auto) return "";
  const std::string why =
      "checkpointing auto chooses its blocks for the budget it runs under, so its stream on the "
      "card is not known from this machine's; predict ";
  if (sweep)
    return why + "checkpointing off or on (every block recomputed): --checkpointing off,on";
  Setting off = *this, on = *this;  // named as --settings spells them
  off.checkpointing = CheckpointMode::Off;
  on.checkpointing = CheckpointMode::On;
  return why + off.label() + " (checkpointing off) or " + on.label() + " (every block recomputed)";
}

}  // namespace training
