#include "training/run/epoch_record.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "training/platform/errors.h"
#include "training/platform/json_rows.h"

namespace training {

namespace {

template <class T>
nlohmann::ordered_json column_json(const T& value) {
  return value;
}
template <class T>
nlohmann::ordered_json column_json(const std::optional<T>& value) {
  return optional_json(value);
}

// Each numeric column's range as the trainer writes it, which a read-back checks (issue 57).
struct ColumnRange {
  const char* key;
  double low, high;
  bool null_is_nan =
      false;  // JSON has no NaN: nlohmann writes it as null (a diverged run's losses)
};
constexpr double kNoEnd = std::numeric_limits<double>::infinity();
constexpr ColumnRange kRanges[] = {{"epoch", 1, kNoEnd},
                                   {"train_acc", 0, 1},
                                   {"test_acc", 0, 1},
                                   {"data_wait_fraction", 0, 1},
                                   {"world_size", 1, kNoEnd},
                                   {"accumulate_steps", 1, kNoEnd},
                                   {"train_loss", -kNoEnd, kNoEnd, true},
                                   {"test_loss", -kNoEnd, kNoEnd, true}};

// Every other number is a count, a time, a rate, a size or a fraction: at least 0.
ColumnRange range_of(const char* key) {
  for (const auto& range : kRanges) {
    if (std::string_view(range.key) == key) return range;
  }
  return {key, 0, kNoEnd};
}

// Reads column `key` of `row` into `out` (null for an absent optional value).
class ColumnReader {
 public:
  ColumnReader(const nlohmann::json& row, const std::string& where) : row_(row), where_(where) {}

  template <class T>
  void operator()(const char* key, T& out) const {
    if constexpr (std::is_floating_point_v<T>) {
      // Null only where the trainer writes NaN; elsewhere it is refused below (issue 57).
      if (range_of(key).null_is_nan && row_.contains(key) && row_.at(key).is_null()) {
        out = std::numeric_limits<T>::quiet_NaN();
        return;
      }
    }
    try {
      out = read(key, T{});
    } catch (const nlohmann::json::exception&) {
      fail(key);
    }
  }
  template <class T>
  void operator()(const char* key, std::optional<T>& out) const {
    if (!row_.contains(key)) fail(key);
    try {
      out = row_.at(key).is_null() ? std::nullopt : std::optional<T>(read(key, T{}));
    } catch (const nlohmann::json::exception&) {
      fail(key);
    }
  }

 private:
  // A number as the trainer wrote it (a whole number for a count, within its column's range).
  template <class T>
  T read(const char* key, T) const {
    if constexpr (std::is_arithmetic_v<T>) {
      const ColumnRange range = range_of(key);
      auto bound = [](double value) {
        if constexpr (std::is_integral_v<T>) {
          if (!std::isfinite(value)) {
            return value > 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
          }
        }
        return static_cast<T>(value);
      };
      try {
        return read_at_least<T>(row_, key, bound(range.low), bound(range.high));
      } catch (const std::out_of_range& e) {
        throw UserError(where_ + ": " + e.what() + " (train never writes it: the file was " +
                        "edited or damaged)");
      }
    } else {
      return row_.at(key).get<T>();
    }
  }

  [[noreturn]] void fail(const char* key) const {
    throw UserError(where_ + ": column '" + key + "' is missing or not a " +
                    "value of its type (written by another version of train?)");
  }
  const nlohmann::json& row_;
  const std::string& where_;
};

// Every column once, in file order: `visit(name, member)`.
template <class Record, class Visit>
void columns(Record& r, Visit&& visit) {
  visit("epoch", r.epoch);
  visit("step", r.step);
  visit("lr", r.lr);
  visit("train_loss", r.train_loss);
  visit("train_acc", r.train_acc);
  visit("test_loss", r.test_loss);
  visit("test_acc", r.test_acc);
  visit("epoch_seconds", r.epoch_seconds);
  visit("eval_seconds", r.eval_seconds);
  visit("images_per_second", r.images_per_second);
  visit("device", r.device);
  visit("peak_allocated_bytes", r.peak_allocated_bytes);
  visit("peak_reserved_bytes", r.peak_reserved_bytes);
  visit("train_peak_allocated_bytes", r.train_peak_allocated_bytes);
  visit("train_peak_reserved_bytes", r.train_peak_reserved_bytes);
  visit("eval_peak_allocated_bytes", r.eval_peak_allocated_bytes);
  visit("eval_peak_reserved_bytes", r.eval_peak_reserved_bytes);
  visit("skipped_steps", r.skipped_steps);
  visit("grad_scale", r.grad_scale);
  visit("data_seconds", r.data_seconds);
  visit("compute_seconds", r.compute_seconds);
  visit("data_wait_fraction", r.data_wait_fraction);
  visit("utilization_mean", r.utilization_mean);
  visit("utilization_max", r.utilization_max);
  visit("memory_used_max_bytes", r.memory_used_max_bytes);
  visit("world_size", r.world_size);
  visit("warmup_steps", r.warmup_steps);
  visit("warmup_seconds", r.warmup_seconds);
  visit("steady_images_per_second", r.steady_images_per_second);
  visit("batches", r.batches);
  visit("epoch_batches", r.epoch_batches);
  visit("accumulate_steps", r.accumulate_steps);
  visit("effective_batch_size", r.effective_batch_size);
}

}  // namespace

bool diverged(const EpochRecord& r) {
  return !std::isfinite(r.train_loss) || !std::isfinite(r.test_loss);
}

const EpochRecord* first_diverged(const std::vector<EpochRecord>& records) {
  for (const auto& r : records) {
    if (diverged(r)) return &r;
  }
  return nullptr;
}

std::string non_finite_text(double value) {
  if (std::isnan(value)) return "NaN";
  return value > 0 ? "inf" : "-inf";
}

std::string divergence_text(const EpochRecord& r) {
  const bool train = !std::isfinite(r.train_loss);
  return "diverged in epoch " + std::to_string(r.epoch) + " (step " + std::to_string(r.step) +
         "): the " + (train ? "training" : "test") + " loss is " +
         non_finite_text(train ? r.train_loss : r.test_loss);
}

nlohmann::ordered_json to_json(const EpochRecord& record) {
  nlohmann::ordered_json row;
  columns(record, [&](const char* key, const auto& value) { row[key] = column_json(value); });
  return row;
}

std::optional<EpochTime> epoch_time(const EpochRecord& r) {
  if (r.epoch_batches == 0 || r.batches >= r.epoch_batches) return EpochTime{r.epoch_seconds};
  if (!r.steady_images_per_second || r.batches == 0) return std::nullopt;
  const double images_per_batch = r.images_per_second * r.epoch_seconds / r.batches;
  const double missing = static_cast<double>(r.epoch_batches - r.batches) * images_per_batch;
  return EpochTime{r.epoch_seconds + missing / *r.steady_images_per_second, true,
                   r.batches / std::max<int64_t>(r.accumulate_steps, 1) - r.warmup_steps};
}

std::vector<AccuracyCrossing> accuracy_crossings(const std::vector<EpochRecord>& records,
                                                 const std::vector<double>& thresholds) {
  std::vector<AccuracyCrossing> crossings;
  for (const double threshold : thresholds) {
    double seconds = 0;
    for (const auto& r : records) {
      seconds += r.epoch_seconds + r.eval_seconds;
      if (r.test_acc >= threshold) {
        crossings.push_back({threshold, r.epoch, r.step, seconds});
        break;
      }
    }
  }
  return crossings;
}

Scalars tensorboard_scalars(const EpochRecord& r) {
  Scalars s = {
      {"train/epoch_loss", r.train_loss},
      {"train/epoch_accuracy", r.train_acc},
      {"train/epoch_lr", r.lr},
      {"test/loss", r.test_loss},
      {"test/accuracy", r.test_acc},
      {"time/epoch_seconds", r.epoch_seconds},
      {"time/eval_seconds", r.eval_seconds},
      {"time/images_per_second", r.images_per_second},
      {"time/data_seconds", r.data_seconds},
      {"time/compute_seconds", r.compute_seconds},
      {"time/data_wait_fraction", r.data_wait_fraction},
      {"memory/peak_allocated_bytes", static_cast<double>(r.peak_allocated_bytes)},
      {"memory/train_peak_allocated_bytes", static_cast<double>(r.train_peak_allocated_bytes)},
      {"memory/eval_peak_allocated_bytes", static_cast<double>(r.eval_peak_allocated_bytes)}};
  auto optional = [&](const char* tag, const auto& value) {
    if (value) s.emplace_back(tag, static_cast<double>(*value));
  };
  optional("memory/peak_reserved_bytes", r.peak_reserved_bytes);
  optional("memory/train_peak_reserved_bytes", r.train_peak_reserved_bytes);
  optional("memory/eval_peak_reserved_bytes", r.eval_peak_reserved_bytes);
  optional("train/grad_scale", r.grad_scale);
  optional("device/utilization_mean", r.utilization_mean);
  optional("device/utilization_max", r.utilization_max);
  optional("device/memory_used_max_bytes", r.memory_used_max_bytes);
  optional("time/steady_images_per_second", r.steady_images_per_second);
  return s;
}

EpochRecord epoch_record_from_json(const nlohmann::json& row, const std::string& where) {
  EpochRecord record;
  columns(record, ColumnReader(row, where));
  return record;
}

}  // namespace training
