#include "training/config/decisions.h"

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include "training/platform/errors.h"
#include "training/platform/memory.h"

namespace training {

using Json = nlohmann::ordered_json;

Config decided(const Config& asked, const Decisions& decisions) {
  Config config = asked;
  if (!asked.training.memory_format && decisions.layout) {
    config.training.memory_format = decisions.layout->format;
  }
  if (asked.checkpointing.mode() == CheckpointMode::Auto && !asked.checkpointing.blocks() &&
      decisions.checkpointing) {
    config.checkpointing.blocks(decisions.checkpointing->blocks);
  }
  return config;
}

std::string decisions_json(const Decisions& d) {
  Json j = Json::object();
  if (d.layout) {
    j["memory_format"] = {{"decides", "training.memory_format"},
                          {"layout", memory_format_name(d.layout->format)},
                          {"device_type", d.layout->device_type},
                          {"reason", d.layout->reason}};
  }
  if (d.checkpointing) {
    const auto& c = *d.checkpointing;
    j["checkpointing"] = {{"decides", "checkpointing.blocks"},
                          {"blocks", c.blocks},
                          {"chosen_for", c.chosen_for},
                          {"budget_bytes", c.budget},
                          {"predicted_peak_bytes", c.predicted_peak},
                          {"predicted_extra_ms", c.predicted_extra_ms}};
  }
  return j.dump(2) + "\n";
}

namespace {

// The entry `key` of `object`, of the type `is` accepts, or a UserError naming both.
template <class Is>
const Json& entry(const Json& object, const std::string& section, const std::string& key, Is is,
                  const char* expected, const std::string& origin) {
  const auto found = object.find(key);
  if (found == object.end() || !is(*found)) {
    throw UserError(origin + ": " + section + "." + key + ": expected " + expected +
                    (found == object.end() ? ", missing" : ", got " + found->dump()));
  }
  return *found;
}

LayoutDecision parse_layout(const Json& j, const std::string& origin) {
  auto is_string = [](const Json& v) { return v.is_string(); };
  LayoutDecision layout;
  const std::string name =
      entry(j, "memory_format", "layout", is_string, "contiguous or channels_last", origin);
  if (name == "channels_last") {
    layout.format = c10::MemoryFormat::ChannelsLast;
  } else if (name != "contiguous") {
    throw UserError(origin + ": memory_format.layout: expected contiguous or channels_last, got " +
                    name);
  }
  layout.device_type = entry(j, "memory_format", "device_type", is_string, "a string", origin);
  layout.reason = entry(j, "memory_format", "reason", is_string, "a string", origin);
  return layout;
}

CheckpointingDecision parse_checkpointing(const Json& j, const std::string& origin) {
  auto is_string = [](const Json& v) { return v.is_string(); };
  auto is_bytes = [](const Json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; };
  auto is_names = [](const Json& v) {
    if (!v.is_array()) return false;
    for (const auto& item : v)
      if (!item.is_string()) return false;
    return true;
  };
  const std::string s = "checkpointing";
  CheckpointingDecision c;
  c.blocks = entry(j, s, "blocks", is_names, "a list of block names", origin)
                 .get<std::vector<std::string>>();
  c.chosen_for = entry(j, s, "chosen_for", is_string, "a string", origin);
  c.budget = entry(j, s, "budget_bytes", is_bytes, "a byte count", origin);
  c.predicted_peak = entry(j, s, "predicted_peak_bytes", is_bytes, "a byte count", origin);
  c.predicted_extra_ms = entry(
      j, s, "predicted_extra_ms", [](const Json& v) { return v.is_number() && v >= 0; },
      "a number of milliseconds", origin);
  return c;
}

}  // namespace

Decisions parse_decisions(const std::string& json, const std::string& origin) {
  const Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    throw UserError(origin +
                    ": expected a JSON object of decisions (memory_format, "
                    "checkpointing), got " +
                    (j.is_discarded() ? std::string("text that is not JSON") : j.type_name()));
  }
  Decisions d;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_object()) {
      throw UserError(origin + ": " + key + ": expected an object, got " + value.type_name());
    }
    if (key == "memory_format") {
      d.layout = parse_layout(value, origin);
    } else if (key == "checkpointing") {
      d.checkpointing = parse_checkpointing(value, origin);
    } else {
      throw UserError(origin + ": unknown decision '" + key +
                      "' (expected memory_format or checkpointing)");
    }
  }
  return d;
}

std::optional<CheckpointingDecision> recorded_in_config(const std::string& yaml) {
  YAML::Node c;
  try {
    c = YAML::Load(yaml)["checkpointing"];
  } catch (const YAML::Exception&) {
    return std::nullopt;  // the config's own parser says what is wrong with it
  }
  if (!c.IsMap() || !c["chosen_for"].IsScalar() || c["chosen_for"].Scalar().empty() ||
      !c["blocks"].IsSequence()) {
    return std::nullopt;
  }
  CheckpointingDecision d;
  try {
    d.blocks = c["blocks"].as<std::vector<std::string>>();
    d.chosen_for = c["chosen_for"].Scalar();
    auto bytes = [&](const char* key) -> int64_t {
      const auto node = c[key];
      return node.IsScalar() && node.Scalar() != "none" ? parse_byte_size(node.Scalar()) : 0;
    };
    d.budget = bytes("chosen_budget");
    d.predicted_peak = bytes("predicted_peak");
    if (c["predicted_extra_ms"].IsScalar()) {
      d.predicted_extra_ms = c["predicted_extra_ms"].as<double>();
    }
  } catch (const std::exception&) {
    return std::nullopt;  // not a record this build can read: chosen again
  }
  return d;
}

}  // namespace training
