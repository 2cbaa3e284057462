// PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) as the card's process reads it: the
// AllocatorOptions of the caching allocator model (caching_allocator.h).
#pragma once

#include <string>

#include "training/studies/caching_allocator.h"

namespace training {

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
