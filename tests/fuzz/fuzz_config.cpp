// Fuzz target: the config parser on arbitrary YAML text. Every input must be accepted or refused
// with ConfigError (one line naming the key); anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "training/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    training::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  } catch (const training::ConfigError&) {
  }
  return 0;
}
