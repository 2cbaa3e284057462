#include "training/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "training/memory.h"

namespace training {
namespace {

template <class E>
using Choices = std::vector<std::pair<std::string, E>>;

const Choices<int64_t> kArchs = {
    {"resnet18", 18}, {"resnet34", 34}, {"resnet50", 50}, {"resnet101", 101}, {"resnet152", 152}};
const Choices<models::Stem> kStems = {{"cifar", models::Stem::Cifar},
                                      {"imagenet", models::Stem::ImageNet}};
const Choices<data::Source> kSources = {{"auto", data::Source::Auto},
                                        {"binary", data::Source::Binary},
                                        {"images", data::Source::Images},
                                        {"synthetic", data::Source::Synthetic}};
const Choices<Precision> kPrecisions = {
    {"fp32", Precision::FP32}, {"bf16", Precision::BF16}, {"fp16", Precision::FP16}};
const Choices<c10::MemoryFormat> kMemoryFormats = {
    {"contiguous", c10::MemoryFormat::Contiguous},
    {"channels_last", c10::MemoryFormat::ChannelsLast}};
const Choices<CheckpointGranularity> kGranularities = {
    {"block", CheckpointGranularity::Block},
    {"stage", CheckpointGranularity::Stage},
    {"segments", CheckpointGranularity::Segments}};
const Choices<DistributedBackend> kBackends = {{"auto", DistributedBackend::Auto},
                                               {"gloo", DistributedBackend::Gloo},
                                               {"nccl", DistributedBackend::Nccl}};
const Choices<ScheduleKind> kSchedules = {{"constant", ScheduleKind::Constant},
                                          {"cosine", ScheduleKind::Cosine},
                                          {"onecycle", ScheduleKind::OneCycle},
                                          {"step", ScheduleKind::Step}};

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// The config's spelling of `value`.
template <class E>
std::string choice_text(const Choices<E>& choices, const E& value) {
  for (const auto& [text, option] : choices) {
    if (option == value) return text;
  }
  return "?";  // unreachable: every enum value has its entry above
}

// The schema: every section and key, its type and its allowed values, listed once. Reading,
// writing and listing keys all walk this.
template <class V>
void walk(V& v, Config& c) {
  v.section("model", [&] {
    v.choice("arch", c.model.depth(), kArchs);
    v.choice("stem", c.model.stem(), kStems);
    v.integer("num_classes", c.model.num_classes(), 1, 100000);
    v.boolean("zero_init_residual", c.model.zero_init_residual());
  });
  v.section("data", [&] {
    v.choice("source", c.data.dataset.source(), kSources);
    v.text("root", c.data.dataset.root());
    v.integer("train_limit", c.data.dataset.train_limit(), 0, kMaxInt);
    v.integer("test_limit", c.data.dataset.test_limit(), 0, kMaxInt);
    v.integer("synthetic_train_size", c.data.dataset.synthetic_train_size(), 1, 10000000);
    v.integer("synthetic_test_size", c.data.dataset.synthetic_test_size(), 1, 10000000);
    v.boolean("augment", c.data.augment);
    v.boolean("device_resident", c.data.device_resident);
    v.integer_or_auto("prefetch", c.data.prefetch, 0, 64);
    v.real("simulated_delay_ms", c.data.simulated_delay_ms, 0.0, 60000.0);
  });
  v.section("training", [&] {
    v.text("device", c.training.device);
    v.integer("epochs", c.training.epochs, 1, 100000);
    v.integer("max_steps", c.training.max_steps, 0, kMaxInt);
    v.integer("batch_size", c.training.batch_size, 1, 1 << 20);
    v.integer("eval_batch_size", c.training.eval_batch_size, 1, 1 << 20);
    v.integer("seed", c.training.seed, 0, kMaxInt);
    v.real("label_smoothing", c.training.label_smoothing, 0.0, 0.99);
    v.integer("log_every_steps", c.training.log_every_steps, 1, 1000000);
    v.integer("threads", c.training.threads, 0, 4096);
    v.choice("precision", c.training.precision, kPrecisions);
    v.choice("memory_format", c.training.memory_format, kMemoryFormats);
    v.boolean("cudnn_benchmark", c.training.cudnn_benchmark);
    v.boolean("allow_tf32", c.training.allow_tf32);
  });
  v.section("optimizer", [&] {
    v.real("lr", c.optimizer.lr(), 1e-12, 1e3);
    v.real("momentum", c.optimizer.momentum(), 0.0, 0.999999);
    v.boolean("nesterov", c.optimizer.nesterov());
    v.real("weight_decay", c.optimizer.weight_decay(), 0.0, 1.0);
    v.boolean("decay_norm_and_bias", c.optimizer.decay_norm_and_bias());
    v.boolean("fused", c.optimizer.fused());
  });
  v.section("schedule", [&] {
    v.choice("name", c.schedule.kind(), kSchedules);
    v.real("warmup_epochs", c.schedule.warmup_epochs(), 0.0, 100000.0);
    v.real("warmup_start_factor", c.schedule.warmup_start_factor(), 0.0, 1.0);
    v.real("min_lr_factor", c.schedule.min_lr_factor(), 0.0, 1.0);
    v.integers("milestones", c.schedule.milestones(), 1, 100000);
    v.real("gamma", c.schedule.gamma(), 1e-6, 1.0);
    v.real("pct_start", c.schedule.pct_start(), 0.01, 0.99);
    v.real("div_factor", c.schedule.div_factor(), 1.0, 1e6);
    v.real("final_div_factor", c.schedule.final_div_factor(), 1.0, 1e9);
  });
  v.section("checkpointing", [&] {
    v.boolean("enabled", c.checkpointing.enabled());
    v.choice("granularity", c.checkpointing.granularity(), kGranularities);
    v.integer("segments", c.checkpointing.segments(), 1, 1000);
  });
  v.section("memory", [&] { v.bytes("limit", c.memory.limit); });
  v.section("monitor", [&] {
    v.real("sample_period", c.monitor.sample_period, 0.0, 3600.0);
    v.real("data_wait_threshold", c.monitor.data_wait_threshold, 0.0, 1.0);
    v.real("utilization_threshold", c.monitor.utilization_threshold, 0.0, 1.0);
  });
  v.section("profiler", [&] {
    v.boolean("enabled", c.profiler.enabled);
    v.integers("steps", c.profiler.steps, 1, kMaxInt, /*non_empty=*/true);
    v.integer("top", c.profiler.top, 1, 1000);
    v.boolean("record_shapes", c.profiler.record_shapes);
  });
  v.section("checkpoint", [&] { v.boolean("enabled", c.checkpoint.enabled); });
  v.section("output", [&] {
    v.text("dir", c.output.dir);
    v.text("name", c.output.name);
  });
  v.section("sweep", [&] {
    v.integers("batch_sizes", c.sweep.batch_sizes, 1, 1 << 20, /*non_empty=*/true);
    v.choices("precisions", c.sweep.precisions, kPrecisions);
    v.booleans("checkpointing", c.sweep.checkpointing);
    v.choices("memory_formats", c.sweep.memory_formats, kMemoryFormats);
    v.integer("warmup_steps", c.sweep.warmup_steps, 0, 1000);
    v.integer("measure_steps", c.sweep.measure_steps, 1, 10000);
    v.boolean("find_max", c.sweep.find_max);
    v.integer("max_batch", c.sweep.max_batch, 1, 1 << 20);
    v.byte_sizes("predict_for", c.sweep.predict_for);
    v.integer("trial_timeout", c.sweep.trial_timeout, 1, 7 * 86400);
  });
  v.section("distributed", [&] {
    v.choice("backend", c.distributed.backend, kBackends);
    v.integer("bucket_mb", c.distributed.bucket_mb, 1, 1024);
    v.integer("timeout_seconds", c.distributed.timeout_seconds, 1, 86400);
  });
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

// "(did you mean 'x'?)" for a close match, else the list of valid names.
std::string suggestion(const std::string& wrong, const std::vector<std::string>& valid,
                       const std::string& prefix) {
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const auto& name : valid) {
    const size_t d = edit_distance(wrong, name);
    if (!best || d < best_distance) best = &name, best_distance = d;
  }
  if (best && best_distance <= std::max<size_t>(2, best->size() / 3)) {
    return "(did you mean '" + prefix + *best + "'?)";
  }
  return "(valid: " + join(valid, ", ") + ")";
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "'" + node.Scalar() + "'";
}

// yaml-cpp throws when asking the type of a missing ("zombie") node, so ask IsDefined first.
bool is_map(const YAML::Node& node) {
  return node.IsDefined() && node.IsMap();
}

std::string shortest_double(double value) {
  if (value == std::floor(value) && std::abs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));  // 1000, not 1e+03
  }
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

class Reader {
 public:
  // `overridden`: the paths ("section.key", and "section" for sections that only an override
  // created) that flags set, with the text that names the flag in messages.
  Reader(YAML::Node root, std::string origin, std::map<std::string, std::string> overridden)
      : root_(std::move(root)), origin_(std::move(origin)), overridden_(std::move(overridden)) {}

  template <class Body>
  void section(const std::string& name, Body&& body) {
    sections_.push_back(name);
    section_ = name;
    // Rebind (plain assignment would write into the previous section); a missing section becomes
    // an empty node, since yaml-cpp refuses to bind to a missing one.
    const YAML::Node found = root_[name];
    node_.reset(found.IsDefined() ? found : YAML::Node());
    fields_.clear();
    if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
      fail(name, "expected a mapping of keys, got " + describe(node_));
    }
    body();
    if (!is_map(node_)) return;
    for (const auto& entry : node_) {
      const auto key = entry.first.Scalar();
      if (std::find(fields_.begin(), fields_.end(), key) == fields_.end()) {
        throw ConfigError(origin_for(name + "." + key) + ": unknown key '" + name + "." + key +
                          "' " + suggestion(key, fields_, name + "."));
      }
    }
  }

  void integer(const std::string& name, int64_t& out, int64_t lo, int64_t hi) {
    const auto node = field(name);
    if (!node) return;
    const std::string expected = "expected an integer in [" + std::to_string(lo) + ", " +
                                 (hi == kMaxInt ? std::string("inf") : std::to_string(hi)) + "]";
    int64_t value = 0;
    if (!node->IsScalar() || !YAML::convert<int64_t>::decode(*node, value)) {
      fail(name, expected + ", got " + describe(*node));
    }
    if (value < lo || value > hi) fail(name, expected + ", got " + std::to_string(value));
    out = value;
  }

  // "auto" (stored as kAutoPrefetch) or an integer in [lo, hi].
  void integer_or_auto(const std::string& name, int64_t& out, int64_t lo, int64_t hi) {
    const auto node = field(name);
    if (!node) return;
    if (node->IsScalar() && node->Scalar() == "auto") return void(out = kAutoPrefetch);
    int64_t value = 0;
    if (!node->IsScalar() || !YAML::convert<int64_t>::decode(*node, value) || value < lo ||
        value > hi) {
      fail(name, "expected auto or an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got " + describe(*node));
    }
    out = value;
  }

  void real(const std::string& name, double& out, double lo, double hi) {
    const auto node = field(name);
    if (!node) return;
    const std::string expected =
        "expected a number in [" + shortest_double(lo) + ", " + shortest_double(hi) + "]";
    double value = 0;
    if (!node->IsScalar() || !YAML::convert<double>::decode(*node, value) ||
        !std::isfinite(value)) {
      fail(name, expected + ", got " + describe(*node));
    }
    if (value < lo || value > hi) fail(name, expected + ", got " + node->Scalar());
    out = value;
  }

  void boolean(const std::string& name, bool& out) {
    const auto node = field(name);
    if (!node) return;
    if (!node->IsScalar() || !YAML::convert<bool>::decode(*node, out)) {
      fail(name, "expected true or false, got " + describe(*node));
    }
  }

  void text(const std::string& name, std::string& out) {
    const auto node = field(name);
    if (!node) return;
    if (node->IsNull()) {
      out.clear();
      return;
    }
    if (!node->IsScalar()) fail(name, "expected a string, got " + describe(*node));
    out = node->Scalar();
  }

  template <class E>
  void choice(const std::string& name, E& out, const Choices<E>& choices) {
    const auto node = field(name);
    if (!node) return;
    std::vector<std::string> names;
    for (const auto& [text, value] : choices) {
      names.push_back(text);
      if (node->IsScalar() && node->Scalar() == text) {
        out = value;
        return;
      }
    }
    fail(name, "expected one of " + join(names, ", ") + ", got " + describe(*node));
  }

  void integers(const std::string& name, std::vector<int64_t>& out, int64_t lo, int64_t hi,
                bool non_empty = false) {
    const std::string expected = std::string("expected a ") + (non_empty ? "non-empty " : "") +
                                 "list of integers in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "]";
    list(name, out, non_empty, expected, [&](const YAML::Node& item, int64_t& value) {
      return YAML::convert<int64_t>::decode(item, value) && value >= lo && value <= hi;
    });
  }

  template <class E>
  void choices(const std::string& name, std::vector<E>& out, const Choices<E>& choices) {
    std::vector<std::string> names;
    for (const auto& choice : choices) names.push_back(choice.first);
    list(name, out, true, "expected a non-empty list of " + join(names, ", "),
         [&](const YAML::Node& item, E& value) {
           for (const auto& [text, option] : choices) {
             if (item.Scalar() == text) return value = option, true;
           }
           return false;
         });
  }

  void booleans(const std::string& name, std::vector<bool>& out) {
    std::vector<int> values(out.begin(), out.end());
    list(name, values, true, "expected a non-empty list of true/false",
         [](const YAML::Node& item, int& value) {
           bool flag = false;
           if (!YAML::convert<bool>::decode(item, flag)) return false;
           return value = flag, true;
         });
    out.assign(values.begin(), values.end());
  }

  void bytes(const std::string& name, int64_t& out) {
    const auto node = field(name);
    if (!node) return;
    if (node->IsNull()) return void(out = 0);
    if (!node->IsScalar()) fail(name, "expected a size like 12GiB, got " + describe(*node));
    if (node->Scalar() == "none") return void(out = 0);
    try {
      out = parse_byte_size(node->Scalar());
    } catch (const std::invalid_argument& e) {
      fail(name, e.what());
    }
  }

  void byte_sizes(const std::string& name, std::vector<int64_t>& out) {
    list(name, out, false, "expected a list of sizes like [12GiB, 24GiB]",
         [](const YAML::Node& item, int64_t& value) {
           try {
             value = parse_byte_size(item.Scalar());
             return value > 0;
           } catch (const std::invalid_argument&) {
             return false;
           }
         });
  }

  // Reads a YAML list whose items `decode` converts (returning false for a bad item).
  template <class T, class Decode>
  void list(const std::string& name, std::vector<T>& out, bool non_empty,
            const std::string& expected, Decode decode) {
    const auto node = field(name);
    if (!node) return;
    if (!node->IsSequence()) fail(name, expected + ", got " + describe(*node));
    std::vector<T> values;
    for (const auto& item : *node) {
      T value{};
      if (!item.IsScalar() || !decode(item, value)) {
        fail(name, expected + ", got " + describe(item) + " in the list");
      }
      values.push_back(value);
    }
    if (non_empty && values.empty()) fail(name, expected + ", got an empty list");
    out = std::move(values);
  }

  // Top-level keys that are not sections.
  void check_sections() const {
    if (!is_map(root_)) return;
    for (const auto& entry : root_) {
      const auto key = entry.first.Scalar();
      if (std::find(sections_.begin(), sections_.end(), key) == sections_.end()) {
        throw ConfigError(origin_for(key) + ": unknown section '" + key + "' " +
                          suggestion(key, sections_, ""));
      }
    }
  }

 private:
  std::optional<YAML::Node> field(const std::string& name) {
    fields_.push_back(name);
    if (!is_map(node_)) return std::nullopt;
    YAML::Node node = node_[name];
    if (!node.IsDefined()) return std::nullopt;
    return node;
  }

  std::string origin_for(const std::string& path) const {
    const auto found = overridden_.find(path);
    return found != overridden_.end() ? found->second : origin_;
  }

  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    const std::string path = name == section_ ? name : section_ + "." + name;
    throw ConfigError(origin_for(path) + ": " + path + ": " + what);
  }

  const YAML::Node root_;
  std::string origin_;
  std::map<std::string, std::string> overridden_;
  std::vector<std::string> sections_;
  std::string section_;
  YAML::Node node_;
  std::vector<std::string> fields_;
};

class Writer {
 public:
  Writer() { out_ << YAML::BeginMap; }
  std::string str() {
    out_ << YAML::EndMap;
    return std::string(out_.c_str()) + "\n";
  }
  template <class Body>
  void section(const std::string& name, Body&& body) {
    out_ << YAML::Key << name << YAML::Value << YAML::BeginMap;
    body();
    out_ << YAML::EndMap;
  }
  void integer(const std::string& name, int64_t value, int64_t, int64_t) { emit(name, value); }
  void integer_or_auto(const std::string& name, int64_t value, int64_t, int64_t) {
    if (value == kAutoPrefetch) return emit(name, std::string("auto"));
    emit(name, value);
  }
  void real(const std::string& name, double value, double, double) {
    emit(name, shortest_double(value));
  }
  void boolean(const std::string& name, bool value) { emit(name, value); }
  void text(const std::string& name, const std::string& value) {
    out_ << YAML::Key << name << YAML::Value << YAML::DoubleQuoted << value;
  }
  template <class E>
  void choice(const std::string& name, const E& value, const Choices<E>& choices) {
    emit(name, choice_text(choices, value));
  }
  void integers(const std::string& name, const std::vector<int64_t>& values, int64_t, int64_t,
                bool = false) {
    out_ << YAML::Key << name << YAML::Value << YAML::Flow << values;
  }
  template <class E>
  void choices(const std::string& name, const std::vector<E>& values, const Choices<E>& choices) {
    std::vector<std::string> texts;
    for (const auto& value : values) texts.push_back(choice_text(choices, value));
    out_ << YAML::Key << name << YAML::Value << YAML::Flow << texts;
  }
  void booleans(const std::string& name, const std::vector<bool>& values) {
    out_ << YAML::Key << name << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (bool value : values) out_ << value;
    out_ << YAML::EndSeq;
  }
  void bytes(const std::string& name, int64_t value) {
    emit(name, value == 0 ? std::string("none") : byte_size_text(value));
  }
  void byte_sizes(const std::string& name, const std::vector<int64_t>& values) {
    std::vector<std::string> texts;
    for (int64_t value : values) texts.push_back(byte_size_text(value));
    out_ << YAML::Key << name << YAML::Value << YAML::Flow << texts;
  }

 private:
  template <class T>
  void emit(const std::string& name, const T& value) {
    out_ << YAML::Key << name << YAML::Value << value;
  }
  YAML::Emitter out_;
};

class KeyLister {
 public:
  template <class Body>
  void section(const std::string& name, Body&& body) {
    section_ = name;
    body();
  }
  template <class... Rest>
  void integer(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void real(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void integer_or_auto(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void boolean(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void text(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void choice(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void integers(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void choices(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void booleans(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void bytes(const std::string& name, Rest&&...) {
    add(name);
  }
  template <class... Rest>
  void byte_sizes(const std::string& name, Rest&&...) {
    add(name);
  }
  std::vector<std::string> keys;

 private:
  void add(const std::string& name) { keys.push_back(section_ + "." + name); }
  std::string section_;
};

// Sets section.key=value in `root`, creating the section as needed. Records in `overridden` what
// names the flag in messages, for the key and (when the override created it) the section.
void apply_override(YAML::Node& root, const Override& override,
                    std::map<std::string, std::string>& overridden) {
  const std::string& assignment = override.assignment;
  const auto eq = assignment.find('=');
  const bool set = override.flag == "--set";
  // "--set key=value" names itself; a shorthand flag names itself with the value it was given.
  const std::string flag =
      set ? "--set " + assignment
          : override.flag + " " +
                (eq == std::string::npos ? assignment : assignment.substr(eq + 1));
  if (eq == std::string::npos || eq == 0) throw ConfigError(flag + ": expected key.path=value");
  const std::string path = assignment.substr(0, eq);
  std::vector<std::string> parts;
  std::stringstream stream(path);
  for (std::string part; std::getline(stream, part, '.');) parts.push_back(part);
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
    throw ConfigError(flag + ": expected section.key=value, e.g. training.epochs=2");
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(flag + ": value is not valid YAML (" + e.msg + ")");
  }
  if (!is_map(root)) root = YAML::Node(YAML::NodeType::Map);
  YAML::Node section = root[parts[0]];
  const std::string label = set ? "--set " + path : override.flag;
  if (section.IsDefined() && !section.IsNull() && !section.IsMap()) {
    throw ConfigError(label + ": '" + parts[0] + "' is not a section");
  }
  if (!section.IsDefined()) overridden[parts[0]] = set ? "--set " + parts[0] : override.flag;
  if (!is_map(section)) root[parts[0]] = YAML::Node(YAML::NodeType::Map);
  root[parts[0]][parts[1]] = value;
  overridden[path] = label;
}

// Duplicate keys: YAML parsers keep the first silently; refused here, naming both lines.
void check_duplicate_keys(const YAML::Node& node, const std::string& origin,
                          const std::string& prefix) {
  if (!is_map(node)) return;
  std::map<std::string, int> first_line;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const int line = entry.first.Mark().line + 1;
    const auto [found, fresh] = first_line.emplace(key, line);
    if (!fresh) {
      throw ConfigError(origin + ": duplicate key '" + prefix + key + "' at lines " +
                        std::to_string(found->second) + " and " + std::to_string(line) +
                        " (YAML would keep the first silently); keep one");
    }
    check_duplicate_keys(entry.second, origin, prefix + key + ".");
  }
}

// Checks that span keys. `origin_for(key)` names where the key was set (the file or a flag).
void validate(const Config& c, const std::function<std::string(const std::string&)>& origin_for) {
  auto fail = [&](const std::string& message) {
    const std::string key = message.substr(0, message.find(':'));
    throw ConfigError(origin_for(key) + ": " + message);
  };
  static const std::regex kDevice("auto|cpu|cuda(:[0-9]+)?");
  if (!std::regex_match(c.training.device, kDevice)) {
    fail("training.device: expected auto, cpu, cuda or cuda:<index>, got '" + c.training.device +
         "'");
  }
  if (c.optimizer.nesterov() && c.optimizer.momentum() <= 0.0) {
    fail("optimizer.nesterov: true needs optimizer.momentum > 0 (set nesterov: false)");
  }
  if (c.schedule.kind() == ScheduleKind::OneCycle && c.schedule.warmup_epochs() > 0) {
    fail(
        "schedule.warmup_epochs: must be 0 with schedule.name onecycle, which warms up by "
        "itself (see schedule.pct_start)");
  }
  const auto& m = c.schedule.milestones();
  if (!std::is_sorted(m.begin(), m.end()) || std::adjacent_find(m.begin(), m.end()) != m.end()) {
    fail("schedule.milestones: expected strictly increasing epochs");
  }
  if (c.output.name.find('/') != std::string::npos || c.output.name == "." ||
      c.output.name == "..") {
    fail("output.name: expected a folder name without '/', got '" + c.output.name + "'");
  }
  if (c.output.dir.empty()) fail("output.dir: expected a folder path, got an empty string");
  const auto& window = c.profiler.steps;
  if (window.size() != 2 || window[0] > window[1]) {
    fail("profiler.steps: expected [first, last] optimizer steps with first <= last, e.g. [5, 7]");
  }
  if (c.data.dataset.root().empty() && c.data.dataset.source() != data::Source::Synthetic) {
    fail("data.root: expected a folder path, got an empty string");
  }
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<Override>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(origin + ": YAML syntax error at line " + std::to_string(e.mark.line + 1) +
                      ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (root.IsDefined() && !root.IsNull() && !root.IsMap()) {
    throw ConfigError(origin +
                      ": expected a mapping of sections (model, data, training, ...) "
                      "at the top level, got " +
                      describe(root));
  }
  check_duplicate_keys(root, origin, "");
  std::map<std::string, std::string> overridden;
  for (const auto& override : overrides) apply_override(root, override, overridden);

  Config config;
  Reader reader(root, origin, overridden);
  walk(reader, config);
  reader.check_sections();
  validate(config, [&](const std::string& key) {
    const auto found = overridden.find(key);
    return found != overridden.end() ? found->second : origin;
  });
  return config;
}

Config load_config(const std::string& path, const std::vector<Override>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(path + ": is a directory, expected a YAML config file");
  }
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open config file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, overrides);
}

std::string to_yaml(const Config& config) {
  Writer writer;
  Config copy = config;  // walk() takes a mutable Config; the writer only reads it
  walk(writer, copy);
  return writer.str();
}

std::vector<std::string> config_keys() {
  KeyLister lister;
  Config config;
  walk(lister, config);
  return lister.keys;
}

int64_t prefetch_for(const DataConfig& data, bool cuda) {
  return data.prefetch != kAutoPrefetch ? data.prefetch : (cuda ? 2 : 0);
}

std::string memory_format_name(c10::MemoryFormat format) {
  return choice_text(kMemoryFormats, format);
}

std::string source_name(data::Source source) {
  return choice_text(kSources, source);
}

std::string granularity_name(CheckpointGranularity granularity) {
  return choice_text(kGranularities, granularity);
}

std::string schedule_name(ScheduleKind kind) {
  return choice_text(kSchedules, kind);
}

std::string byte_size_text(int64_t bytes) {
  static const std::pair<const char*, int64_t> kUnits[] = {{"TiB", int64_t{1} << 40},
                                                           {"GiB", int64_t{1} << 30},
                                                           {"MiB", int64_t{1} << 20},
                                                           {"KiB", 1024}};
  for (const auto& [unit, size] : kUnits) {
    if (bytes >= size && bytes % size == 0) return std::to_string(bytes / size) + unit;
  }
  return std::to_string(bytes);
}

std::string arch_name(const models::ResNetOptions& model) {
  return choice_text(kArchs, model.depth());
}

std::string stem_name(const models::ResNetOptions& model) {
  return choice_text(kStems, model.stem());
}

}  // namespace training
