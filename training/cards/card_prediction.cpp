#include "training/cards/card_prediction.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "data/dataset.h"
#include "data/loader.h"
#include "models/resnet.h"
#include "training/cards/speed_calibration.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"

namespace training {

HeldData held_data(const Config& config) {
  HeldData held;
  held.prefetched_batches = prefetch_for(config.data, /*cuda=*/true);
  held.image_size = config.data.image_size;
  if (config.data.device_resident) {
    if (config.data.dataset.source() != data::Source::Synthetic) {  // a large folder takes seconds
      spdlog::info("data.device_resident: counting both splits in {} (held on the card)",
                   config.data.dataset.root());
    }
    const data::SplitSizes splits = data::split_sizes(
        config.data.dataset, "data.device_resident: the card holds both splits, counted");
    // One process's order, the whole split's: a data-parallel rank holds its shard's, less.
    held.resident = data::device_resident_tensors(splits.train, splits.test, splits.train);
  }
  return held;
}

CardPredictor::CardPredictor(Config config, Card card, AllocatorOptions options,
                             int64_t allocator_limit)
    : config_(std::move(config)),
      card_(std::move(card)),
      beside_(beside_tensors(card_)),
      allocator_(options),
      reducer_bucket_bytes_(reducer_bucket_bytes(config_)),
      held_(held_data(config_)) {
  allocator_.limit = std::max<int64_t>(1, card_.memory_bytes - beside_.outside_allocator);
  allocator_.device_memory = card_.memory_bytes;
  if (allocator_limit > 0) {
    allocator_.limit = allocator_limit;
  } else if (config_.memory.limit > 0 && config_.memory.limit < allocator_.limit) {
    allocator_.limit = config_.memory.limit;
    limited_by_memory_limit_ = true;
  }
}

namespace {

// Every micro-batch after the second holds what the second holds: 2 stand for any number.
Setting as_recorded(Setting setting) {
  setting.accumulate_steps = std::min<int64_t>(setting.accumulate_steps, 2);
  return setting;
}

}  // namespace

CardPredictor::Recorded& CardPredictor::recorded(const Setting& asked) {
  const Setting setting = as_recorded(asked);
  for (auto& known : recorded_) {
    if (known.setting == setting) return known;
  }
  const int64_t a = kTraceBatches[0], b = kTraceBatches[1], c = kTraceBatches[2];
  spdlog::info("{}: recording the step's allocations at batches {}, {} and {} (CPU, 1 thread)",
               setting.name(), a, b, c);
  // Each recording takes seconds (ResNet-50's three: 6.7 s): a graceful stop is taken before each.
  auto record = [&](int64_t batch) {
    test_stop_point(fmt::format("card recording batch {}", batch));  // tests: a stop before it
    if (stop_requested()) {
      throw RecordingStopped(fmt::format(
          "not predicted: stopped by a signal before its step's recording at batch {} (of {}, {} "
          "and {})",
          batch, a, b, c));
    }
    return record_step_stream(config_, setting, batch);
  };
  const AllocationStream at_a = record(a);
  const AllocationStream at_b = record(b);
  LinearStream stream = linear_stream(at_a, a, at_b, b);
  const int64_t mismatched = mismatched_allocations(stream, record(c), c);
  recorded_.push_back({setting, std::move(stream), mismatched, {}, 0});
  return recorded_.back();
}

std::optional<int64_t> CardPredictor::largest_batch(const Setting& setting) const {
  for (const auto& known : recorded_) {
    if (known.setting == as_recorded(setting) && !known.shown.empty()) return known.largest;
  }
  return std::nullopt;
}

CardPrediction CardPredictor::predict(const Setting& setting, int64_t batch,
                                      AllocatorSnapshot* snapshot) {
  Recorded& r = recorded(setting);
  CardPrediction p;
  p.card = card_;
  p.beside = beside_;
  p.allocator = allocator_;
  p.limited_by_memory_limit = limited_by_memory_limit_;
  p.held = held_;
  p.batch_size = batch;
  p.checked_batch = kTraceBatches[2];
  p.mismatched = r.mismatched;
  p.reducer_bucket_bytes = reducer_bucket_bytes_;
  const AllocationStream stream = with_held_data(r.stream.at(batch), batch, p.held);
  p.replay = replay_stream(stream, p.allocator, p.beside, snapshot);
  // What it needs, above the limit it did not fit under (never a smaller figure than the card's).
  const int64_t failed_under = p.replay.fits ? 0 : p.allocator.limit;
  p.needed_limit = smallest_fitting_limit(stream, p.allocator, p.beside, &p.needed, failed_under);
  // The size advised is one a user can type back: `--card SIZE` has a size card's workspaces.
  const BesideTensors by_size = beside_tensors(Card{});
  if (!p.replay.fits && by_size.cublas_workspace != p.beside.cublas_workspace) {
    Replay at_it;
    p.needed_by_size = smallest_fitting_limit(stream, p.allocator, by_size, &at_it, failed_under) +
                       by_size.outside_allocator;
  }
  if (snapshot && !p.replay.fits) {  // the figures are what the step needs: drawn so
    AllocatorOptions needed = p.allocator;
    needed.limit = p.needed_limit;
    replay_stream(stream, needed, p.beside, snapshot);
  }
  TORCH_INTERNAL_ASSERT(!snapshot || snapshot->reserved == p.figures().peak_reserved,
                        "the snapshot is not the prediction's reserved peak");
  p.train_images = train_images_at_most(config_.data);
  p.accumulate_steps = setting.accumulate_steps;
  p.unsupported = card_.unsupported(setting.precision);
  // At or above every batch of the setting predicted to fit, this one too: one figure for all.
  if (std::find(r.shown.begin(), r.shown.end(), batch) == r.shown.end()) r.shown.push_back(batch);
  r.largest = largest_fitting_batch(
      r.stream, p.held, p.allocator, p.beside,
      models::smallest_trainable_batch(config_.model, p.held.image_size), r.shown);
  p.largest_batch = r.largest;
  Config config = config_;
  setting.apply_to(config);
  try {
    p.speed = predict_step(config, batch, card_);
  } catch (const std::invalid_argument& e) {  // the card has no speed, said as such
    p.no_speed = e.what();
  } catch (const std::exception& e) {  // the memory prediction stands without it
    p.no_speed = "speed not estimated: " + error_line(e);
  }
  return p;
}

CardPrediction predict_on_card(const Config& config, const Setting& setting, const Card& card,
                               const AllocatorOptions& allocator, AllocatorSnapshot* snapshot) {
  return CardPredictor(config, card, allocator)
      .predict(setting, config.training.batch_size, snapshot);
}

}  // namespace training
