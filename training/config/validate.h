// The checks that span keys, in one place: parse_config runs them on every config it makes,
// after each key's own type and range (config.cpp's walk()).
#pragma once

#include <functional>
#include <string>

#include "training/config/config.h"

namespace training {

// Throws ConfigError naming the key and where it was set: `origin_for(key)` names the file or the
// flag.
void validate(const Config& c, const std::function<std::string(const std::string&)>& origin_for);

}  // namespace training
