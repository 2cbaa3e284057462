#include "training/cards/linear_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace training {

namespace {

// n / d rounded down and up, for d > 0.
int64_t floor_div(int64_t n, int64_t d) {
  return n / d - (n % d != 0 && n < 0 ? 1 : 0);
}
int64_t ceil_div(int64_t n, int64_t d) {
  return -floor_div(-n, d);
}

}  // namespace

AllocationStream LinearStream::at(int64_t batch) const {
  AllocationStream stream = at_a;
  for (size_t i = 0; i < stream.events.size(); ++i) {
    auto& event = stream.events[i];
    if (event.is_free()) continue;
    event.bytes =
        std::max<int64_t>(1, event.bytes + ceil_div(slope_numerator[i] * (batch - a), b - a));
  }
  return stream;
}

std::optional<int64_t> LinearStream::first_batch_over(int64_t bytes) const {
  std::optional<int64_t> first;
  for (size_t i = 0; i < at_a.events.size(); ++i) {
    const int64_t size = at_a.events[i].bytes;
    if (at_a.events[i].is_free() || slope_numerator[i] <= 0) continue;
    // size + ceil(slope x (batch - a) / (b - a)) > bytes exactly when batch - a > (bytes - size)
    // x (b - a) / slope: from a + floor of that + 1 on. Sizes and limits are below 2^51 (cards
    // are at most 1 PiB) and b - a is small: no overflow.
    const int64_t batch =
        std::max<int64_t>(1, a + floor_div((bytes - size) * (b - a), slope_numerator[i]) + 1);
    first = std::min(first.value_or(batch), batch);
  }
  return first;
}

LinearStream linear_stream(const AllocationStream& at_a, int64_t a, const AllocationStream& at_b,
                           int64_t b) {
  const auto& x = at_a.events;
  const auto& y = at_b.events;
  const size_t common = std::min(x.size(), y.size());
  for (size_t i = 0; i < common; ++i) {
    if (x[i].id != y[i].id || x[i].is_free() != y[i].is_free()) {
      throw std::runtime_error(fmt::format(
          "the allocation streams at batch {} and {} differ at event {} of {}: the step does not "
          "allocate the same tensors at every batch, so it cannot be scaled",
          a, b, i, x.size()));
    }
  }
  if (x.size() != y.size()) {
    throw std::runtime_error(
        fmt::format("the allocation streams at batch {} and {} have {} and {} events", a, b,
                    x.size(), y.size()));
  }
  LinearStream linear{at_a, {}, a, b};
  linear.slope_numerator.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) linear.slope_numerator[i] = y[i].bytes - x[i].bytes;
  return linear;
}

int64_t mismatched_allocations(const LinearStream& stream, const AllocationStream& recorded,
                               int64_t batch) {
  const AllocationStream predicted = stream.at(batch);
  if (predicted.events.size() != recorded.events.size()) return -1;
  int64_t mismatched = 0;
  for (size_t i = 0; i < predicted.events.size(); ++i) {
    const auto& p = predicted.events[i];
    const auto& r = recorded.events[i];
    if (p.id != r.id || p.is_free() != r.is_free()) return -1;
    if (p.bytes != r.bytes) ++mismatched;
  }
  return mismatched;
}

}  // namespace training
