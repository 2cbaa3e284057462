// PYTORCH_CUDA_ALLOC_CONF as the card's process reads it (caching_allocator.h): the options the
// model follows, and a refusal naming any other.
#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "training/platform/errors.h"
#include "training/studies/caching_allocator.h"

namespace training {

AllocatorOptions parse_alloc_conf(const std::string& text) {
  AllocatorOptions options;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(std::remove_if(item.begin(), item.end(), ::isspace), item.end());
    if (item.empty()) continue;
    const auto colon = item.find(':');
    const std::string key = item.substr(0, colon);
    const std::string value = colon == std::string::npos ? "" : item.substr(colon + 1);
    auto refuse = [&](const std::string& expected) {
      throw UserError("PYTORCH_CUDA_ALLOC_CONF: " + key + ": expected " + expected + ", got '" +
                      value + "'");
    };
    if (key == "max_split_size_mb") {
      if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
          value.size() > 9 || std::stoll(value) * kMiB <= 20 * kMiB) {  // kLargeBuffer
        refuse("a whole number of MiB above 20");
      }
      options.max_split_size = std::stoll(value) * kMiB;
    } else if (key == "expandable_segments") {
      if (value != "True" && value != "False") refuse("True or False");
      options.expandable_segments = value == "True";
    } else {
      throw UserError("PYTORCH_CUDA_ALLOC_CONF: " + key +
                      ": not modelled (the card prediction follows max_split_size_mb and "
                      "expandable_segments only)");
    }
  }
  return options;
}

AllocatorOptions alloc_conf_from_environment() {
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  return parse_alloc_conf(conf ? conf : "");
}

std::string alloc_conf_text(const AllocatorOptions& options) {
  std::string text;
  if (options.max_split_size != AllocatorOptions{}.max_split_size) {
    text = "max_split_size_mb:" + std::to_string(options.max_split_size / kMiB);
  }
  if (options.expandable_segments)
    text += std::string(text.empty() ? "" : ",") + "expandable_segments:True";
  return text;
}

}  // namespace training
