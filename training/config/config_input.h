// A config's overrides (--set, the shorthand flags) and ConfigError, below both the schema
// (config.h) and the YAML machinery (config_yaml.h).
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

// One override, "section.key=value" (YAML), and the flag messages name: "--set" (then "--set
// section.key"), or a shorthand such as "--device".
struct Override {
  Override(std::string assignment, std::string flag = "--set")
      : assignment(std::move(assignment)), flag(std::move(flag)) {}
  Override(const char* assignment) : Override(std::string(assignment)) {}
  std::string assignment;
  std::string flag;
};

}  // namespace training
