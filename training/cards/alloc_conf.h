// PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) as the card's process reads it: the
// AllocatorOptions of the caching allocator model (caching_allocator.h).
#pragma once

#include <cstring>
#include <string>
#include <string_view>

#include "training/cards/caching_allocator.h"

namespace training {

// The variable as LibTorch reads it: `key:value` items separated by single commas (one trailing
// comma allowed), a value a word or a bracketed list of words or word:word pairs ([1,2],
// [256:1,>:8]), blanks anywhere (its tokenizer drops them). LibTorch reads the variable while it
// loads, on a machine without a GPU too, and aborts on other forms ("garbage", "key:", "a:b c:d").
// Calls item(key, value) for each item (blanks kept) and returns false at the first malformed one.
// Plain C without allocation: app/process.cpp runs it before any library is initialised.
template <class Item>
bool for_each_alloc_conf_item(const char* text, Item&& item) {
  const char* p = text;
  const auto blank = [](char c) { return c != 0 && std::strchr(" \t\n\v\f\r", c) != nullptr; };
  const auto blanks = [&] {
    while (blank(*p)) ++p;
  };
  const auto word = [&] {  // characters other than :,[] of which one at least is not blank
    bool seen = false;
    for (; *p && !std::strchr(":,[]", *p); ++p) seen = seen || !blank(*p);
    return seen;
  };
  for (blanks(); *p; blanks()) {
    const char* key = p;
    if (!word()) return false;
    const std::string_view key_text(key, static_cast<size_t>(p - key));
    if (*p++ != ':') return false;
    blanks();
    const char* value = p;
    if (*p == '[') {  // words, or word:word pairs, separated by commas
      ++p;
      blanks();
      if (*p != ']') {
        do {
          if (!word() || (*p == ':' && (++p, !word()))) return false;
        } while (*p == ',' && ++p);
      }
      if (*p++ != ']') return false;
    } else if (!word()) {
      return false;
    }
    item(key_text, std::string_view(value, static_cast<size_t>(p - value)));
    blanks();
    if (*p && *p++ != ',') return false;
  }
  return true;
}

// "max_split_size_mb:128, expandable_segments:True". Options the model does not follow
// (roundup_power2_divisions, garbage_collection_threshold, backend, ...) are refused: UserError
// naming `variable` and the option.
AllocatorOptions parse_alloc_conf(const std::string& text,
                                  const std::string& variable = "PYTORCH_CUDA_ALLOC_CONF");
// parse_alloc_conf of the variable LibTorch 2.11 reads: PYTORCH_CUDA_ALLOC_CONF when set (empty
// too), else PYTORCH_ALLOC_CONF; the defaults when neither is.
AllocatorOptions alloc_conf_from_environment();
std::string alloc_conf_text(const AllocatorOptions& options);      // "" for the defaults
std::string alloc_conf_label(const std::string& alloc_conf_text);  // "the defaults" for ""

}  // namespace training
