#include "training/config/decisions.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "training/config/config_yaml.h"
#include "training/config/validate.h"
#include "training/platform/device.h"
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

std::string undecided_keys(const Config& asked) {
  std::string keys = asked.training.memory_format ? "" : "training.memory_format";
  if (asked.checkpointing.mode() == CheckpointMode::Auto && !asked.checkpointing.blocks())
    keys += std::string(keys.empty() ? "" : " and ") + "checkpointing.blocks";
  return keys;
}

std::string step_signature(const Config& config, const std::optional<c10::MemoryFormat>& layout,
                           const c10::Device& device) {
  const auto& t = config.training;
  const auto& o = config.optimizer;
  std::string step = fmt::format("{} {} stem, {} classes, batch {}", arch_name(config.model),
                                 stem_name(config.model), config.model.num_classes(), t.batch_size);
  step += resized_text(config.data.image_size);
  if (t.accumulate_steps > 1)
    step += fmt::format(" in {} micro-batches a step", t.accumulate_steps);
  step += std::string(", ") + precision_name(t.precision);
  if (layout) step += ", " + memory_format_name(*layout);
  step += o.momentum() > 0 ? ", sgd with momentum" : ", sgd";
  if (o.nesterov()) step += ", nesterov";
  if (o.weight_decay() > 0)
    step += o.decay_norm_and_bias() ? ", weight decay on every parameter" : ", weight decay";
  if (o.fused()) step += ", fused";
  if (t.ema_decay > 0) step += ", weight average";
  step += ", on " + device_identity(device);
  if (device.is_cuda()) {
    step +=
        std::string(t.cudnn_benchmark ? ", cuDNN benchmark" : "") + (t.allow_tf32 ? ", TF32" : "");
  }
  return step;
}

std::string decisions_json(const Decisions& d) {
  Json j = Json::object();
  if (d.layout) {
    j["memory_format"] = {{"decides", "training.memory_format"},
                          {"layout", memory_format_name(d.layout->format)},
                          {"device_type", d.layout->device_type},
                          {"reason", d.layout->reason},
                          {"chosen_for", d.layout->chosen_for}};
  }
  if (d.checkpointing) {
    const auto& c = *d.checkpointing;
    j["checkpointing"] = {{"decides", "checkpointing.blocks"},
                          {"blocks", c.blocks},
                          {"chosen_for", c.chosen_for},
                          {"budget_bytes", c.budget},
                          {"predicted_peak_bytes", c.predicted_peak},
                          {"predicted_extra_ms", c.predicted_extra_ms},
                          {"beside_step_bytes", c.beside_bytes},
                          {"from_step", c.from_step},
                          {"cheaper_from_bytes", c.cheaper_from}};
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

// An entry's fields: the known ones only (a misspelt field would be dropped silently).
void check_fields(const Json& j, const std::string& section, std::vector<std::string> known,
                  const std::string& origin) {
  known.push_back("decides");
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw UserError(origin + ": " + section + "." + key + ": unknown field (expected " +
                      config_yaml::join(known, ", ") + ")");
    }
  }
}

LayoutDecision parse_layout(const Json& j, const std::string& origin) {
  check_fields(j, "memory_format", {"layout", "device_type", "reason", "chosen_for"}, origin);
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
  layout.chosen_for = entry(j, "memory_format", "chosen_for", is_string, "a string", origin);
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
  check_fields(j, s,
               {"blocks", "chosen_for", "budget_bytes", "predicted_peak_bytes",
                "predicted_extra_ms", "beside_step_bytes", "from_step", "cheaper_from_bytes"},
               origin);
  CheckpointingDecision c;
  c.blocks = entry(j, s, "blocks", is_names, "a list of block names", origin)
                 .get<std::vector<std::string>>();
  c.chosen_for = entry(j, s, "chosen_for", is_string, "a string", origin);
  c.budget = entry(j, s, "budget_bytes", is_bytes, "a byte count", origin);
  c.predicted_peak = entry(j, s, "predicted_peak_bytes", is_bytes, "a byte count", origin);
  c.predicted_extra_ms = entry(
      j, s, "predicted_extra_ms", [](const Json& v) { return v.is_number() && v >= 0; },
      "a number of milliseconds", origin);
  c.beside_bytes = entry(j, s, "beside_step_bytes", is_bytes, "a byte count", origin);
  // Absent: made before the run's first step (decisions.json before it recorded from_step).
  if (j.contains("from_step")) {
    c.from_step = entry(j, s, "from_step", is_bytes, "a number of steps", origin);
  }
  // Absent: made before it was recorded; any larger budget may hold a cheaper choice.
  c.cheaper_from =
      j.contains("cheaper_from_bytes")
          ? entry(j, s, "cheaper_from_bytes", is_bytes, "a byte count", origin).get<int64_t>()
          : (c.blocks.empty() ? 0 : c.budget + 1);
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

void check_decisions(const Decisions& decisions, const Config& config, const std::string& origin) {
  if (!decisions.checkpointing) return;
  const std::string problem = blocks_problem(decisions.checkpointing->blocks, config.model);
  if (!problem.empty()) throw UserError(origin + ": checkpointing.blocks: " + problem);
}

}  // namespace training
