// A config's training set against a step's images: how many it holds at most, and why train
// refuses a step that takes more (config.h declares them).
#include <fmt/format.h>

#include <algorithm>

#include "training/config/config.h"

namespace training {

int64_t train_images_at_most(const DataConfig& data) {
  const auto& d = data.dataset;
  const int64_t limit = d.train_limit();
  if (d.source() != data::Source::Synthetic) return limit;
  return limit > 0 ? std::min(limit, d.synthetic_train_size()) : d.synthetic_train_size();
}

std::string untrainable_batch(int64_t batch, int64_t accumulate_steps, int64_t train_images) {
  if (train_images <= 0 || batch * accumulate_steps <= train_images) return "";
  if (accumulate_steps > 1) {
    return fmt::format(
        "batch {} in {} micro-batches ({} images a step) is more than the {} training images of "
        "the sweep's config, which train refuses (training.accumulate_steps)",
        batch, accumulate_steps, batch * accumulate_steps, train_images);
  }
  return fmt::format(
      "batch {} is more than the {} training images of the sweep's config, which "
      "train refuses (training.batch_size)",
      batch, train_images);
}

std::string beyond_training_set(int64_t batch, int64_t accumulate_steps, int64_t train_images,
                                const std::string& of) {
  const int64_t images = batch * accumulate_steps;  // a step's
  if (train_images <= 0 || images <= train_images) return "";
  return " (" + (accumulate_steps > 1 ? std::to_string(images) + " images a step: " : "") +
         "more than the " + std::to_string(train_images) + " training images" + of +
         ", which train refuses)";
}

}  // namespace training
