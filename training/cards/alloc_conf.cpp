// PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) as the card's process reads it (alloc_conf.h):
// the options the model follows, and a refusal naming any other.
#include "training/cards/alloc_conf.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>

#include "training/platform/errors.h"

namespace training {

namespace {

// At most 200 bytes of `text`, cut before a UTF-8 character that would not fit whole, and "...".
std::string shortened(const std::string& text) {
  const size_t kept = utf8_prefix(text.data(), text.size(), 200);
  return kept == text.size() ? text : text.substr(0, kept) + "...";
}

// A value as the card's process reads it: blanks dropped, at most 200 bytes echoed.
std::string quoted(const std::string& value) {
  return "'" + shortened(value) + "'" +
         (value.size() > 200 ? " (" + std::to_string(value.size()) + " bytes)" : "");
}

// max_split_size_mb's value: LibTorch 2.11 takes std::stoull of it, at least kLargeBuffer / 1 MiB
// (20), and caps it at SIZE_MAX / 1 MiB (c10/core/AllocatorConfig.cpp, parseMaxSplitSize). Digits
// only here: its stoull also takes "-5" as 2^64 - 5 and "21abc" as 21.
std::optional<int64_t> max_split_size_bytes(const std::string& value) {
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) return {};
  try {
    const unsigned long long mib = std::stoull(value);
    if (mib < 20) return {};
    if (mib > static_cast<unsigned long long>(std::numeric_limits<int64_t>::max() / kMiB)) {
      return std::numeric_limits<int64_t>::max();  // larger than any block: no limit
    }
    return static_cast<int64_t>(mib) * kMiB;
  } catch (const std::out_of_range&) {
    return {};
  }
}

}  // namespace

AllocatorOptions parse_alloc_conf(const std::string& text, const std::string& variable) {
  AllocatorOptions options;
  const auto without_blanks = [](std::string_view view) {
    std::string kept(view);
    kept.erase(std::remove_if(kept.begin(), kept.end(), ::isspace), kept.end());
    return kept;
  };
  const bool well_formed = for_each_alloc_conf_item(text.c_str(), [&](std::string_view k,
                                                                      std::string_view v) {
    const std::string key = without_blanks(k), value = without_blanks(v);
    auto refuse = [&](const std::string& expected) {
      throw UserError(variable + ": " + key + ": expected " + expected + ", got " + quoted(value));
    };
    if (key == "max_split_size_mb") {
      const auto bytes = max_split_size_bytes(value);
      if (!bytes)
        refuse("a whole number of MiB from 20 to 18446744073709551615 (LibTorch's stoull)");
      options.max_split_size = *bytes;
    } else if (key == "expandable_segments") {
      if (value != "True" && value != "False") refuse("True or False");
      options.expandable_segments = value == "True";
    } else {
      throw UserError(variable + ": " + shortened(key) +
                      ": not modelled (the card prediction follows max_split_size_mb and "
                      "expandable_segments only)");
    }
  });
  if (!well_formed) {
    throw UserError(variable +
                    ": expected key:value items separated by single commas (e.g. "
                    "expandable_segments:True,max_split_size_mb:128), got " +
                    quoted(text));
  }
  return options;
}

AllocatorOptions alloc_conf_from_environment() {
  // LibTorch 2.11 reads PYTORCH_CUDA_ALLOC_CONF when it is set, empty too, and PYTORCH_ALLOC_CONF
  // only otherwise (c10/cuda/CUDAAllocatorConfig.h; measured for AcceleratorAllocatorConfig).
  for (const char* variable : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    if (const char* conf = std::getenv(variable)) return parse_alloc_conf(conf, variable);
  }
  return {};
}

std::string alloc_conf_label(const std::string& alloc_conf_text) {
  return alloc_conf_text.empty() ? "the defaults" : alloc_conf_text;
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
