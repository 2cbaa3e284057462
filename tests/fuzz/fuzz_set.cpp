// Fuzz target: `--set key=value` overrides (one per input line) over a small config. Every input
// must be accepted or refused with ConfigError; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "training/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  std::vector<training::Override> overrides;
  for (std::string line; std::getline(lines, line);) overrides.emplace_back(line);
  try {
    training::parse_config("model: {arch: resnet18}\ntraining: {epochs: 2}\n", "fuzz.yaml",
                           overrides);
  } catch (const training::ConfigError&) {
  }
  return 0;
}
