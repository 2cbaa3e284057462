// The checks that span keys, in one place: parse_config runs them on every config it makes,
// after each key's own type and range (config.cpp's walk()).
#pragma once

#include <functional>
#include <string>

#include "training/config/config.h"

namespace training {

// What is wrong with `blocks` as blocks of `model` to recompute ("'layer9.9' is not a block of
// resnet18 (layer1.0 ... layer4.1)", "'layer1.0' is listed twice; list each block once"); empty
// when each is a block of it, once. For checkpointing.blocks and a run's recorded decision alike.
std::string blocks_problem(const std::vector<std::string>& blocks,
                           const models::ResNetOptions& model);

// Throws ConfigError naming the key and where it was set: `origin_for(key)` names the file or the
// flag.
void validate(const Config& c, const std::function<std::string(const std::string&)>& origin_for);

}  // namespace training
