#include "training/config/config_yaml.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

namespace training::config_yaml {

namespace {

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

}  // namespace

std::string flow_text(const YAML::Node& node) {
  YAML::Emitter out;
  out.SetSeqFormat(YAML::Flow);
  out.SetMapFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

namespace {

// The keys of `edited` (a section, or a sub-section inside one) whose values differ from `base`'s.
void add_differences(const YAML::Node& base, const YAML::Node& edited, const std::string& prefix,
                     std::vector<std::string>& out) {
  for (const auto& key : edited) {
    const std::string name = key.first.as<std::string>();
    const YAML::Node was = is_map(base) ? base[name] : YAML::Node();
    if (is_map(key.second)) {
      add_differences(was, key.second, prefix + name + ".", out);
      continue;
    }
    const std::string text = flow_text(key.second);
    if (was.IsDefined() && flow_text(was) == text) continue;
    out.push_back(prefix + name + "=" + text);
  }
}

}  // namespace

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string trimmed(const std::string& text) {
  const char* blanks = " \t\r\n\v\f";
  const size_t first = text.find_first_not_of(blanks);
  return first == std::string::npos ? ""
                                    : text.substr(first, text.find_last_not_of(blanks) + 1 - first);
}

std::vector<std::string> split_items(const std::string& text, const std::string& flag) {
  std::vector<std::string> items;
  size_t begin = 0;
  for (;;) {
    const size_t comma = text.find(',', begin);
    items.push_back(
        trimmed(text.substr(begin, comma == std::string::npos ? comma : comma - begin)));
    if (items.back().empty()) {
      throw ConfigError(flag + ": '" + text +
                        "' has an empty item; expected items separated by single commas, e.g. a,b");
    }
    if (comma == std::string::npos) return items;
    begin = comma + 1;
  }
}

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

bool nothing(const YAML::Node& node) {
  return !node.IsDefined() || node.IsNull() || node.Tag() == kNullTag ||
         (node.IsScalar() && (node.Tag() == "?" || node.Tag().empty()) && blank(node.Scalar()));
}

std::string describe(const YAML::Node& node) {
  if (nothing(node)) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "'" + one_line(node.Scalar()) + "'";
}

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

std::optional<double> real_number(std::string text, bool percent) {
  const bool as_percent = percent && !text.empty() && text.back() == '%';
  if (as_percent) text.pop_back();
  // At most one space before the '%', as between a size and its unit ("10 %", not "10\t%").
  if (as_percent && !text.empty() && text.back() == ' ') text.pop_back();
  if (text != trimmed(text)) return std::nullopt;
  double value = 0;
  if (!YAML::convert<double>::decode(YAML::Node(text), value) || !std::isfinite(value))
    return std::nullopt;
  return as_percent ? value / 100 : value;
}

std::string percent_text(double share) {
  share += 0.0;  // -0 (a headroom given as -0%) is said as 0%
  for (int digits = 9; digits <= 17; ++digits) {
    const std::string text = fmt::format("{:.{}g}%", share * 100, digits);
    const double back = real_number(text, true).value_or(-1);
    if (std::abs(back - share) <= 4 * std::numeric_limits<double>::epsilon() * std::abs(share) &&
        (back < 1 || share >= 1))
      return text;
  }
  return fmt::format("{}", share);
}

bool decimal_integer(const YAML::Node& node, int64_t& out) {
  if (!node.IsScalar()) return false;
  const std::string& text = node.Scalar();
  size_t start = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  if (start == text.size()) return false;
  for (size_t i = start; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
  }
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);  // base 10: leading zeros too
  if (errno == ERANGE || *end != '\0') return false;
  out = value;
  return true;
}

void Reader::optional_texts(const std::string& name, std::optional<std::vector<std::string>>& out) {
  const auto node = field(name);
  if (!node) return;
  if (node->IsNull() || node->Tag() == kNullTag) return out.reset();  // not `--set key=`
  if (!node->IsSequence()) fail(name, "expected a list of names or null, got " + describe(*node));
  std::vector<std::string> values;
  for (const auto& item : *node) {
    if (!item.IsScalar() || item.IsNull()) {
      fail(name, "expected a list of names or null, got " + describe(item) + " in the list");
    }
    values.push_back(trimmed(item.Scalar()));  // a block's name, read as a choice is
  }
  out = std::move(values);
}

void Reader::bytes(const std::string& name, int64_t& out) {
  const auto node = field(name);
  if (!node) return;
  // Nothing (`limit:`, --memory-limit ' ') is not none: what was written must be what is taken.
  if (!node->IsScalar() || nothing(*node))
    fail(name, "expected a size like 12GiB, or none, got " + describe(*node));
  if (trimmed(node->Scalar()) == "none") return void(out = 0);
  try {
    out = parse_byte_size(node->Scalar());
  } catch (const std::invalid_argument& e) {
    fail(name, e.what());
  }
  // 0 would read as none (no limit, no budget): what was written must be what is taken.
  if (out == 0) fail(name, "expected a size above 0, or none, got '" + node->Scalar() + "'");
}

Reader::Scope Reader::enter(const std::string& name) {
  const bool nested = !section_.empty();
  if (nested) {
    fields_.push_back(name);  // a key of the enclosing section
  } else {
    sections_.push_back(name);
  }
  const YAML::Node& enclosing = node_;
  const YAML::Node found = !nested         ? root_[name]
                           : is_map(node_) ? enclosing[name]
                                           : YAML::Node(YAML::NodeType::Undefined);
  // A section a flag gives nothing (`--set sweep.slurm=~`) would drop the file's keys in it; in a
  // file, a section whose keys are all commented out is empty.
  const std::string path = nested ? section_ + "." + name : name;
  if ((found.IsDefined() && !found.IsNull() && !found.IsMap()) ||
      (found.IsDefined() && found.IsNull() && overridden_.count(path) > 0)) {
    fail(name, "expected a mapping of keys, got " + describe(found));
  }
  Scope scope{section_, node_, std::move(fields_), std::move(names_), hint_, hint_values_};
  section_ = nested ? section_ + "." + name : name;
  // Rebind (plain assignment would write into the enclosing node); a missing section becomes an
  // empty node, since yaml-cpp refuses to bind to a missing one.
  node_.reset(found.IsDefined() ? found : YAML::Node());
  fields_.clear();
  names_.clear();
  hint_.clear();
  hint_values_ = false;
  return scope;
}

void Reader::leave(const std::string& name, Scope enclosing) {
  if (is_map(node_)) {
    for (const auto& entry : node_) {
      const auto key = entry.first.Scalar();
      if (std::find(fields_.begin(), fields_.end(), key) == fields_.end()) {
        throw ConfigError(origin_for(section_ + "." + key) + ": unknown key '" + section_ + "." +
                          key + "' " + suggestion(key, names_, section_ + ".") +
                          (hint_.empty() ? "" : "; " + hint_));
      }
    }
  }
  const std::vector<std::string> inner = std::move(names_);
  section_ = enclosing.path;
  node_.reset(enclosing.node);
  fields_ = std::move(enclosing.fields);
  names_ = std::move(enclosing.names);
  hint_ = enclosing.hint;
  hint_values_ = enclosing.hint_values;
  // The enclosing section suggests its sub-section's keys by their path in it: "slurm.options".
  for (const auto& key : inner) names_.push_back(name + "." + key);
}

namespace {

// The key gets a node of its own: assigning into its node would change every alias that shares
// it (`batch_size: &b 32` with `eval_batch_size: *b` or `batch_sizes: [*b]`). A mapping given to a
// section sets the keys it names and keeps the others, as a --set of each would
// (`--set 'sweep.slurm={}'` dropped the file's options).
void set_key(YAML::Node& parent, const std::string& key, const YAML::Node& value,
             const std::string& path, const std::string& label,
             std::map<std::string, std::string>& overridden) {
  const YAML::Node existing = static_cast<const YAML::Node&>(parent)[key];
  if (value.IsMap() && (is_map(existing) || !existing.IsDefined() || existing.IsNull())) {
    YAML::Node own(YAML::NodeType::Map);
    if (is_map(existing)) {
      for (const auto& entry : existing) own[entry.first] = entry.second;
    }
    for (const auto& entry : value) {
      if (!entry.first.IsScalar() || nothing(entry.first))
        throw ConfigError(label + ": expected a mapping of keys by name");
      set_key(own, entry.first.Scalar(), entry.second, path + "." + entry.first.Scalar(), label,
              overridden);
    }
    parent.remove(key);
    parent[key] = own;
    overridden[path] = label;
    return;
  }
  parent.remove(key);
  parent[key] = value;
  overridden[path] = label;
}

}  // namespace

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
  if (parts.size() < 2 || path.back() == '.' ||
      std::any_of(parts.begin(), parts.end(), [](const auto& part) { return part.empty(); })) {
    throw ConfigError(flag + ": expected section.key=value, e.g. training.epochs=2");
  }
  // Nothing after '=' (blanks, a comment) is no value at all, not YAML's null, which only `~` or
  // `null` says (`checkpointing.blocks` takes it): a plain empty scalar, which every key refuses.
  const std::string text = trimmed(assignment.substr(eq + 1));
  // One line: YAML would join "1\nGiB" into "1 GiB" (a value no other flag takes so).
  if (text.find_first_of("\n\r") != std::string::npos)
    throw ConfigError(one_line(flag) + ": expected a value on one line");
  YAML::Node value;
  try {
    // Read as a file reads a key's value on its line: as a stream of its own, "--- 2" was 2 and a
    // leading U+FEFF was dropped as a byte-order mark.
    value = YAML::Load("v: " + text)["v"];
  } catch (const YAML::Exception& e) {
    // A block form on one line (`options: [a]`, `- 8`), as a file refuses it after a key.
    const bool block = !text.empty() && text[0] != '[' && text[0] != '{';
    throw ConfigError(flag + ": value is not valid YAML (" + e.msg +
                      (block ? "; a mapping or list is written {key: value} or [a, b]" : "") + ")");
  }
  static const std::set<std::string> kNull = {"~", "null", "Null", "NULL"};
  if (value.IsNull() && value.Tag() != kNullTag && kNull.count(text) == 0) {
    // No value, or an empty one tagged (`!!str`: ""), is an empty scalar that keeps its tag;
    // only `~`, `null` and `!!null` say null.
    const std::string tag = value.Tag();
    value = YAML::Node(std::string{});
    if (tag != "?" && !tag.empty()) value.SetTag(tag);
  }
  check_duplicate_keys(value, flag, path + ".");
  if (!is_map(root)) root = YAML::Node(YAML::NodeType::Map);
  const std::string label = set ? "--set " + path : override.flag;
  // Each section on the path ("sweep", then "sweep.slurm" for sweep.slurm.options) gets a node of
  // its own (its entries, then the next one's below): assigning into a section an alias shares
  // (`checkpoint: &c {...}` with `checkpointing: *c`) changed both.
  YAML::Node parent = root;
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += (i == 0 ? "" : ".") + parts[i];
    const YAML::Node section = parent[parts[i]];
    if (section.IsDefined() && !section.IsNull() && !section.IsMap()) {
      throw ConfigError(label + ": '" + prefix + "' is not a section");
    }
    if (!section.IsDefined()) overridden[prefix] = set ? "--set " + prefix : override.flag;
    YAML::Node own(YAML::NodeType::Map);
    if (is_map(section)) {
      for (const auto& entry : section) own[entry.first] = entry.second;
    }
    parent.remove(parts[i]);
    parent[parts[i]] = own;
    const YAML::Node next = parent[parts[i]];
    parent.reset(next);
  }
  set_key(parent, parts.back(), value, path, label, overridden);
}

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

std::vector<std::string> differing_assignments(const std::string& base_yaml,
                                               const std::string& edited_yaml) {
  const YAML::Node base = YAML::Load(base_yaml), edited = YAML::Load(edited_yaml);
  std::vector<std::string> assignments;
  for (const auto& section : edited) {
    if (!is_map(section.second)) continue;
    const std::string name = section.first.as<std::string>();
    add_differences(base[name], section.second, name + ".", assignments);
  }
  return assignments;
}

}  // namespace training::config_yaml
