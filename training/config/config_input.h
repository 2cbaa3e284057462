// What a config is read from besides its file, and what a bad one throws: the overrides of --set
// and the shorthand flags, and ConfigError. Below both the schema (config.h) and the YAML
// machinery (config_yaml.h), which include it.
#pragma once

#include <string>
#include <utility>

#include "training/platform/errors.h"

namespace training {

// A config problem: the message names the file (or --set), the key, and what was expected.
class ConfigError : public UserError {
 public:
  using UserError::UserError;
};

// One override of a config key: "section.key=value" (the value is YAML), and the flag it came
// from, which error messages name: "--set" (then the message names "--set section.key"), or a
// shorthand such as "--device" or "--memory-limit".
struct Override {
  Override(std::string assignment, std::string flag = "--set")
      : assignment(std::move(assignment)), flag(std::move(flag)) {}
  Override(const char* assignment) : Override(std::string(assignment)) {}
  std::string assignment;
  std::string flag;
};

}  // namespace training
