// The Writer config.cpp's walk() drives (to_yaml): the other half of config_yaml.h's Reader.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <string>
#include <vector>

#include "training/config/config_yaml.h"

namespace training::config_yaml {

// Writes a typed config as YAML as walk() visits the schema: every key, defaults included, in a
// form the Reader reads back to an equal config.
class Writer {
 public:
  // `omitted`: top-level sections left out of the text (a run's config.yaml leaves out sweep).
  explicit Writer(std::vector<std::string> omitted = {}) : omitted_(std::move(omitted)) {
    out_ << YAML::BeginMap;
  }
  std::string str() {
    out_ << YAML::EndMap;
    return std::string(out_.c_str()) + "\n";
  }
  // A section, or a sub-section inside the section being written (a mapping in the mapping).
  template <class Body>
  void section(const std::string& name, Body&& body) {
    if (depth_ == 0 && std::find(omitted_.begin(), omitted_.end(), name) != omitted_.end()) {
      return;
    }
    out_ << YAML::Key << name << YAML::Value << YAML::BeginMap;
    ++depth_;
    body();
    --depth_;
    out_ << YAML::EndMap;
  }
  void integer(const std::string& name, int64_t value, int64_t, int64_t) { emit(name, value); }
  void integer_or_auto(const std::string& name, int64_t value, int64_t, int64_t) {
    if (value == kAuto) return emit(name, std::string("auto"));
    emit(name, value);
  }
  void real(const std::string& name, double value, double, double, bool = false) {
    emit(name, shortest_double(value));
  }
  void boolean(const std::string& name, bool value) { emit(name, value); }
  template <class E>
  void boolean_or_auto(const std::string& name, E value, E off, E on, E) {
    emit(name, boolean_or_auto_text(value, off, on));
  }
  template <class E>
  void booleans_or_auto(const std::string& name, const std::vector<E>& values, E off, E on, E) {
    std::vector<std::string> texts;
    for (const auto& value : values) texts.push_back(boolean_or_auto_text(value, off, on));
    out_ << YAML::Key << name << YAML::Value << YAML::Flow << texts;
  }
  void texts(const std::string& name, const std::vector<std::string>& values) {
    out_ << YAML::Key << name << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& value : values) out_ << YAML::DoubleQuoted << value;
    out_ << YAML::EndSeq;
  }
  void optional_texts(const std::string& name,
                      const std::optional<std::vector<std::string>>& values) {
    out_ << YAML::Key << name << YAML::Value;
    if (!values) {
      out_ << YAML::Null;
      return;
    }
    out_ << YAML::Flow << YAML::BeginSeq;
    for (const auto& value : *values) out_ << YAML::DoubleQuoted << value;
    out_ << YAML::EndSeq;
  }

  void hint(const std::string&, bool) {}
  void text(const std::string& name, const std::string& value, const std::string& = "") {
    out_ << YAML::Key << name << YAML::Value << YAML::DoubleQuoted << value;
  }
  void word(const std::string& name, const std::string& value) { text(name, value); }
  template <class E>
  void choice(const std::string& name, const E& value, const Choices<E>& choices) {
    emit(name, choice_text(choices, value));
  }
  void integers(const std::string& name, const std::vector<int64_t>& values, int64_t, int64_t,
                bool = false) {
    out_ << YAML::Key << name << YAML::Value << YAML::Flow << values;
  }
  void reals(const std::string& name, const std::vector<double>& values, double, double,
             bool = false) {
    std::vector<std::string> texts;
    for (double value : values) texts.push_back(shortest_double(value));
    out_ << YAML::Key << name << YAML::Value << YAML::Flow << texts;
  }
  template <class E>
  void choices(const std::string& name, const std::vector<E>& values, const Choices<E>& choices) {
    std::vector<std::string> texts;
    for (const auto& value : values) texts.push_back(choice_text(choices, value));
    out_ << YAML::Key << name << YAML::Value << YAML::Flow << texts;
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
  template <class E>
  static std::string boolean_or_auto_text(E value, E off, E on) {
    return value == off ? "false" : value == on ? "true" : "auto";
  }
  template <class T>
  void emit(const std::string& name, const T& value) {
    out_ << YAML::Key << name << YAML::Value << value;
  }
  std::vector<std::string> omitted_;
  int depth_ = 0;  // 0 between sections, 1 in a section, 2 in a sub-section
  YAML::Emitter out_;
};

}  // namespace training::config_yaml
