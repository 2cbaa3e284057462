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

// Why `batch` does not train the config's model ("1 does not train: with model.stem imagenet at
// data.image_size 32, layer4's feature map is 1x1, ..."): a BatchNorm in training mode needs more
// than one value per channel, and sees batch x its feature map's height x width
// (models::smallest_feature_map); "" when it trains. A training.batch_size or sweep batch it names
// is refused (validate), and no largest batch that fits is ever one it names.
std::string batch_norm_refusal(const Config& config, int64_t batch);

// Throws ConfigError naming the key and where it was set: `origin_for(key)` names the file or the
// flag.
void validate(const Config& c, const std::function<std::string(const std::string&)>& origin_for);

}  // namespace training
