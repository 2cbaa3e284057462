// The checks that span keys, in one place: parse_config runs them on every config it makes,
// after each key's own type and range (config.cpp's walk()).
#pragma once

#include <functional>
#include <string>

#include "training/config/config.h"

namespace training {

// What is wrong with `blocks` as `model`'s blocks to recompute ("'layer9.9' is not a block of
// resnet18 (layer1.0 ... layer4.1)", "... listed twice ..."), else "": config and decisions alike.
std::string blocks_problem(const std::vector<std::string>& blocks,
                           const models::ResNetOptions& model);

// Why `batch` does not train the model ("1 does not train: with model.stem imagenet at
// data.image_size 32, layer4's feature map is 1x1, ..."): BatchNorm needs more than one value per
// channel (batch x models::smallest_feature_map); "" when it trains. Batches it names are refused.
std::string batch_norm_refusal(const Config& config, int64_t batch);

// Throws ConfigError naming the key and where it was set (`origin_for(key)`: file or flag). A
// record's own output.dir and output.name are not judged as a new folder's (ConfigRead).
void validate(const Config& c, const std::function<std::string(const std::string&)>& origin_for,
              ConfigRead read = ConfigRead::New);

}  // namespace training
