// The YAML machinery behind the schema (config.cpp's walk() drives the Reader and config_writer.h's
// Writer): overrides, the duplicate-key check, "did you mean". Nothing here knows a config key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "training/config/config_input.h"
#include "training/platform/memory.h"

namespace training::config_yaml {

// A choice's spellings and values, e.g. {{"fp32", Precision::FP32}, ...}.
template <class E>
using Choices = std::vector<std::pair<std::string, E>>;

// The spelling of `value` among `choices`.
template <class E>
std::string choice_text(const Choices<E>& choices, const E& value) {
  for (const auto& [text, option] : choices) {
    if (option == value) return text;
  }
  return "?";  // unreachable when every enum value has its entry
}

inline constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
// What an "auto or integer" field holds for "auto".
inline constexpr int64_t kAuto = -1;

// "(did you mean 'x'?)" for a close match, else the list of valid names.
std::string suggestion(const std::string& wrong, const std::vector<std::string>& valid,
                       const std::string& prefix);
std::string join(const std::vector<std::string>& items, const std::string& separator);
// A flag's value, or a list's item, without the ASCII white space around it (' 24GiB', ' 10%').
std::string trimmed(const std::string& text);
// "fp32, bf16" -> {"fp32", "bf16"}, the one reading of a comma-separated flag value (spaces
// trimmed, as YAML reads a list); an empty item ("fp32,", "32,,64") is a ConfigError naming `flag`.
std::vector<std::string> split_items(const std::string& text, const std::string& flag);

// Every list a user gives lists each value once (twice, it would say "2 settings" and measure
// one): "item 3 repeats item 1; list each value once" for the first repeat, else "".
template <class T>
std::string first_repeat(const std::vector<T>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (values[i] == values[j]) {
        return "item " + std::to_string(i + 1) + " repeats item " + std::to_string(j + 1) +
               "; list each value once";
      }
    }
  }
  return "";
}
// Whether a node holds nothing: missing, null (`key:`, `~`, `null`), or `--set key=` with nothing
// or blanks after '=' (apply_override makes that a plain empty scalar, which no key takes, so that
// it is not read as null, which some keys take). A quoted "" is a string, not nothing.
bool nothing(const YAML::Node& node);
inline const std::string kNullTag = "tag:yaml.org,2002:null";  // `!!null`, on an empty scalar
// A node as YAML writes it in flow style, quoted where plain text would read back otherwise
// ("runs #2" quoted, "" as ""): a value --set reads back as it is.
std::string flow_text(const YAML::Node& node);
// How a node is named in a message: "nothing", "a list", "a mapping", "'text'".
std::string describe(const YAML::Node& node);
// yaml-cpp throws when asking the type of a missing ("zombie") node, so this asks IsDefined first.
bool is_map(const YAML::Node& node);
// The keys whose values differ between two configs as to_yaml writes them (sections of keys):
// "section.key=value" with `edited`'s value (flow style, as --set reads it), in its order.
std::vector<std::string> differing_assignments(const std::string& base_yaml,
                                               const std::string& edited_yaml);
// The shortest text that reads back as exactly `value` ("1000", "0.0005").
std::string shortest_double(double value);
// A scalar read as the decimal integer it is written as: "010" is 10 (yaml-cpp alone would read
// YAML 1.1's octal 8), "+5" is 5; "0x10", "0o10", "1e3", "1.0" and overflow are not integers.
bool decimal_integer(const YAML::Node& node, int64_t& out);
// A finite number, or with `percent` also a percentage as the program prints one ("5.0%", "5 %"
// are 0.05); nullopt when it is neither. One reader for the keys and the flags that take a share.
std::optional<double> real_number(std::string text, bool percent);
// Its inverse for a share below 1 (a headroom): "12.345%", "99.9%", "10%", in the fewest digits
// (nine at least) that real_number reads back as `share`, to the last bits its /100 rounds, and
// below 100% (nine digits said 99.99999999% as a refused 100%); else the fraction itself.
std::string percent_text(double share);

// Reads a YAML document as walk() visits the schema, checking each field (type, range, choice) and
// refusing keys the schema lacks with the nearest valid name, naming the file or the flag.
class Reader {
 public:
  // `overridden`: the paths ("section.key", and "section" for sections that only an override
  // created) that flags set, with the text that names the flag in messages. `record`: the text is
  // a record read back (ConfigRead::Record), whose strings an earlier build took as they are.
  Reader(YAML::Node root, std::string origin, std::map<std::string, std::string> overridden,
         bool record = false)
      : root_(std::move(root)),
        origin_(std::move(origin)),
        overridden_(std::move(overridden)),
        record_(record) {}

  // A section ("sweep") or a sub-section of the one being read ("sweep.slurm"); unknown keys get
  // the nearest name among its keys and sub-keys ("slurm_options": 'sweep.slurm.options'?).
  template <class Body>
  void section(const std::string& name, Body&& body) {
    Scope enclosing = enter(name);
    body();
    leave(name, std::move(enclosing));
  }

  void integer(const std::string& name, int64_t& out, int64_t lo, int64_t hi) {
    const auto node = field(name);
    if (!node) return;
    const std::string expected = "expected an integer in [" + std::to_string(lo) + ", " +
                                 (hi == kMaxInt ? std::string("inf") : std::to_string(hi)) + "]";
    int64_t value = 0;
    if (!node->IsScalar() || !decimal_integer(bare(*node), value)) {
      fail(name, expected + ", got " + describe(*node));
    }
    if (value < lo || value > hi) fail(name, expected + ", got " + std::to_string(value));
    out = value;
  }

  // "auto" (stored as kAuto) or an integer in [lo, hi].
  void integer_or_auto(const std::string& name, int64_t& out, int64_t lo, int64_t hi) {
    const auto node = field(name);
    if (!node) return;
    if (node->IsScalar() && trimmed(node->Scalar()) == "auto") return void(out = kAuto);
    int64_t value = 0;
    if (!node->IsScalar() || !decimal_integer(bare(*node), value) || value < lo || value > hi) {
      fail(name, "expected auto or an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got " + describe(*node));
    }
    out = value;
  }

  // true or false in YAML's spellings (on/off, yes/no, ...), or "auto": `off`, `on`, `automatic`.
  template <class E>
  void boolean_or_auto(const std::string& name, E& out, E off, E on, E automatic) {
    const auto node = field(name);
    if (!node) return;
    if (!decode_boolean_or_auto(*node, out, off, on, automatic)) {
      fail(name, "expected true, false or auto, got " + describe(*node));
    }
  }

  template <class E>
  void booleans_or_auto(const std::string& name, std::vector<E>& out, E off, E on, E automatic) {
    list(name, out, true, "expected a non-empty list of true, false or auto",
         [&](const YAML::Node& item, E& value) {
           return decode_boolean_or_auto(item, value, off, on, automatic);
         });
  }

  void texts(const std::string& name, std::vector<std::string>& out) {
    list(name, out, false, "expected a list of strings, none of them blank",
         [](const YAML::Node& item, auto& value) {
           return !nothing(item) && !blank(item.Scalar()) && (value = item.Scalar(), true);
         });
  }

  // A list of strings, or null (nullopt): a value that is set or not yet.
  void optional_texts(const std::string& name, std::optional<std::vector<std::string>>& out);

  // `percent`: a share, also taken as a percentage ("10%" is 0.1), as the program prints one.
  void real(const std::string& name, double& out, double lo, double hi, bool percent = false) {
    const auto node = field(name);
    if (!node) return;
    const std::string expected =
        "expected a number in [" + shortest_double(lo) + ", " + shortest_double(hi) + "]" +
        (percent ? " or a percentage up to " + shortest_double(100 * hi) + "%" : "");
    const std::optional<double> value =
        node->IsScalar() ? real_number(trimmed(node->Scalar()), percent) : std::nullopt;
    if (!value) fail(name, expected + ", got " + describe(*node));
    if (*value < lo || *value > hi) fail(name, expected + ", got " + node->Scalar());
    out = *value;
  }

  void boolean(const std::string& name, bool& out) {
    const auto node = field(name);
    if (!node) return;
    if (!node->IsScalar() || !YAML::convert<bool>::decode(bare(*node), out)) {
      fail(name, "expected true or false, got " + describe(*node));
    }
  }

  // A line for this section's errors, said after an unknown key (and after a bad value too when
  // `for_values`): what a near namesake of the section is for.
  void hint(const std::string& text, bool for_values) {
    hint_ = text;
    hint_values_ = for_values;
  }

  // A string: nothing (`key:`, `~`, `--set key=`) is refused, as for every type, and so is one of
  // only blanks; "" is written quoted. `empty`: what "" says where the key takes it.
  void text(const std::string& name, std::string& out, const std::string& empty = "") {
    const auto node = field(name);
    if (!node) return;
    if (!node->IsScalar() || nothing(*node))
      fail(name, "expected a string" + (empty.empty() ? "" : " (" + empty + ")") + ", got " +
                     describe(*node));
    const bool judged = !record_ || overridden_.count(section_ + "." + name) > 0;
    if (judged && !node->Scalar().empty() && blank(node->Scalar()))
      fail(name, "expected a string that is not only blanks, got '" +
                     blanks_shown(one_line(node->Scalar())) + "'");
    out = node->Scalar();
  }

  // A choice whose spellings are not listed (a device: cpu, cuda:1), read as a choice is: without
  // the ASCII white space around it.
  void word(const std::string& name, std::string& out) {
    text(name, out);
    out = trimmed(out);
  }

  template <class E>
  void choice(const std::string& name, E& out, const Choices<E>& choices) {
    const auto node = field(name);
    if (!node) return;
    std::vector<std::string> names;
    for (const auto& [text, value] : choices) {
      names.push_back(text);
      if (node->IsScalar() && trimmed(node->Scalar()) == text) {
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
      return decimal_integer(bare(item), value) && value >= lo && value <= hi;
    });
  }

  // `percent`: each a share, also taken as a percentage, as real() takes one.
  void reals(const std::string& name, std::vector<double>& out, double lo, double hi,
             bool percent = false) {
    const std::string expected = "expected a list of numbers in [" + shortest_double(lo) + ", " +
                                 shortest_double(hi) + "]" + (percent ? " or percentages" : "");
    list(name, out, false, expected, [&](const YAML::Node& item, double& value) {
      const auto read = real_number(trimmed(item.Scalar()), percent);
      return read && (value = *read, value >= lo && value <= hi);
    });
  }

  template <class E>
  void choices(const std::string& name, std::vector<E>& out, const Choices<E>& choices) {
    std::vector<std::string> names;
    for (const auto& choice : choices) names.push_back(choice.first);
    list(name, out, true, "expected a non-empty list of " + join(names, ", "),
         [&](const YAML::Node& item, E& value) {
           for (const auto& [text, option] : choices) {
             if (trimmed(item.Scalar()) == text) return value = option, true;
           }
           return false;
         });
  }

  // A size with its unit, or none (0).
  void bytes(const std::string& name, int64_t& out);

  void byte_sizes(const std::string& name, std::vector<int64_t>& out) {
    // Card sizes: each with its unit ("24" read as 24 bytes was meant as 24GiB), as --card takes,
    // a bare number offered the forms it may have meant.
    list(name, out, false,
         "expected a list of sizes with their unit like [12GiB, 24GiB], each at most 1024TiB",
         [&](const YAML::Node& item, int64_t& value) {
           std::string bare = no_unit_refusal(item.Scalar());
           if (!bare.empty()) fail(name, bare.insert(bare.find(" has no unit"), " in the list"));
           try {
             value = parse_byte_size(item.Scalar());
             return value > 0 && value <= kLargestCard;
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

  // Every key the schema visited, as "section.key" ("section.sub.key"), in schema order.
  const std::vector<std::string>& keys() const { return keys_; }

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
  // What section() keeps of the enclosing section (or of none) while it reads one.
  struct Scope {
    std::string path;
    YAML::Node node;
    std::vector<std::string> fields, names;
    std::string hint;
    bool hint_values;
  };
  // Into section `name` (checked a mapping), and out of it (its keys checked known).
  Scope enter(const std::string& name);
  void leave(const std::string& name, Scope enclosing);

  std::optional<YAML::Node> field(const std::string& name) {
    fields_.push_back(name);
    names_.push_back(name);
    keys_.push_back(section_ + "." + name);
    if (!is_map(node_)) return std::nullopt;
    YAML::Node node = node_[name];
    if (!node.IsDefined()) return std::nullopt;
    return node;
  }

  std::string origin_for(const std::string& path) const {
    const auto found = overridden_.find(path);
    return found != overridden_.end() ? found->second : origin_;
  }

  // A number's, a boolean's or a choice's scalar without the ASCII white space around it (a quoted
  // " 32", a block scalar's last line break), as a size is read and a flag's value is; only a
  // string is taken as typed.
  static YAML::Node bare(const YAML::Node& node) {
    const std::string text = trimmed(node.Scalar());
    return text == node.Scalar() ? node : YAML::Node(text);
  }

  template <class E>
  static bool decode_boolean_or_auto(const YAML::Node& node, E& out, E off, E on, E automatic) {
    if (!node.IsScalar()) return false;
    if (trimmed(node.Scalar()) == "auto") return out = automatic, true;
    bool flag = false;
    if (!YAML::convert<bool>::decode(bare(node), flag)) return false;
    return out = flag ? on : off, true;
  }

  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    const std::string path = section_.empty() ? name : section_ + "." + name;
    throw ConfigError(origin_for(path) + ": " + path + ": " + what +
                      (hint_values_ && !hint_.empty() ? "; " + hint_ : ""));
  }

  const YAML::Node root_;
  std::string origin_;
  std::map<std::string, std::string> overridden_;
  bool record_ = false;
  std::vector<std::string> sections_;
  std::string section_;  // the section being read, "sweep" or "sweep.slurm"; "" between them
  YAML::Node node_;
  std::vector<std::string> fields_;  // the keys of the section being read, its sub-sections too
  std::vector<std::string> names_;   // its keys as suggested: "options", "slurm.options"
  std::string hint_;                 // hint()
  bool hint_values_ = false;
  std::vector<std::string> keys_;
};

// Sets section.key=value in `root`, creating the section as needed. Records in `overridden` what
// names the flag in messages, for the key and (when the override created it) the section.
void apply_override(YAML::Node& root, const Override& override,
                    std::map<std::string, std::string>& overridden);

// Duplicate keys: YAML parsers keep the first silently; refused here, naming both lines.
void check_duplicate_keys(const YAML::Node& node, const std::string& origin,
                          const std::string& prefix);

}  // namespace training::config_yaml
