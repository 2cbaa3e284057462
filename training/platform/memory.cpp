#include "training/platform/memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace training {

namespace {
thread_local bool host_data_scope = false;  // inside a HostData scope on this thread
}  // namespace

TrackingCpuAllocator::HostData::HostData() : previous_(host_data_scope) {
  host_data_scope = true;
}

TrackingCpuAllocator::HostData::~HostData() {
  host_data_scope = previous_;
}

TrackingCpuAllocator& TrackingCpuAllocator::instance() {
  // Never destroyed: tensors may be freed during static destruction, after main returns.
  static TrackingCpuAllocator* allocator = [] {
    auto* tracking = new TrackingCpuAllocator(c10::GetDefaultCPUAllocator());
    TORCH_CHECK(tracking->base_deleter_ != nullptr, "the default CPU allocator has no raw deleter");
    // Priority above the default (0) so that later default registrations do not replace it.
    c10::SetCPUAllocator(tracking, /*priority=*/1);
    return tracking;
  }();
  return *allocator;
}

c10::DataPtr TrackingCpuAllocator::allocate(size_t bytes) {
  if (host_data_scope) {
    // Untracked: release() finds no size for it and subtracts nothing.
    c10::DataPtr inner = base_->allocate(bytes);
    const auto device = inner.device();
    void* data = inner.release_context();
    return {data, data, &TrackingCpuAllocator::release, device};
  }
  const auto size = static_cast<int64_t>(bytes);
  const int64_t held = current_.fetch_add(size) + size;
  const int64_t limit = limit_.load();
  if (limit > 0 && held > limit) {
    current_.fetch_sub(size);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory (tracked): tried to allocate ",
                     format_bytes(size), " with ", format_bytes(held - size),
                     " already held; limit ", format_bytes(limit), " (memory.limit)");
  }
  for (int64_t peak = peak_.load(); held > peak && !peak_.compare_exchange_weak(peak, held);) {
  }
  c10::DataPtr inner = base_->allocate(bytes);
  const auto device = inner.device();
  void* data = inner.release_context();  // the default CPU allocator's context is the data
  if (data == nullptr) {                 // zero bytes: nothing is held
    current_.fetch_sub(size);
    return {nullptr, nullptr, &TrackingCpuAllocator::release, device};
  }
  {
    std::lock_guard<std::mutex> lock(sizes_mutex_);
    sizes_[data] = size;
    if (timeline_) timeline_->add(size);
  }
  return {data, data, &TrackingCpuAllocator::release, device};
}

void TrackingCpuAllocator::release(void* data) {
  if (data == nullptr) return;
  auto& self = instance();
  int64_t size = 0;
  {
    std::lock_guard<std::mutex> lock(self.sizes_mutex_);
    auto found = self.sizes_.find(data);
    if (found != self.sizes_.end()) {
      size = found->second;
      self.sizes_.erase(found);
      if (self.timeline_) self.timeline_->add(-size);
    }
  }
  self.current_.fetch_sub(size);
  self.base_deleter_(data);
}

void TrackingCpuAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

MemoryStats TrackingCpuAllocator::stats() const {
  const int64_t current = current_.load(), peak = peak_.load();
  return {current, peak, current, peak};
}

void TrackingCpuAllocator::set_timeline(MemoryTimeline* timeline) {
  std::lock_guard<std::mutex> lock(sizes_mutex_);
  timeline_ = timeline;
}

void TrackingCpuAllocator::reset_peak() {
  peak_.store(current_.load());
}

int64_t parse_byte_size(const std::string& text) {
  const std::string expected =
      "expected a size like 12GiB, 512MiB, 1.5GB or a number of bytes, got '" + text + "'";
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    throw std::invalid_argument(expected);
  }
  std::string unit;
  for (size_t i = end; i < text.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(text[i]))) {
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    }
  }
  static const std::pair<const char*, double> kUnits[] = {{"", 1.0},
                                                          {"b", 1.0},
                                                          {"kib", 1024.0},
                                                          {"mib", 1048576.0},
                                                          {"gib", 1073741824.0},
                                                          {"tib", 1099511627776.0},
                                                          {"kb", 1e3},
                                                          {"mb", 1e6},
                                                          {"gb", 1e9},
                                                          {"tb", 1e12}};
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) {
      const double bytes = value * factor;
      if (!std::isfinite(bytes) || bytes < 0 || bytes > 9.0e18)
        throw std::invalid_argument(expected);
      return static_cast<int64_t>(std::llround(bytes));
    }
  }
  throw std::invalid_argument(expected);
}

std::string format_bytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024.0 && unit < 4) value /= 1024.0, ++unit;
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  }
  return text;
}

std::string byte_size_text(int64_t bytes) {
  static const std::pair<const char*, int64_t> kUnits[] = {{"TiB", int64_t{1} << 40},
                                                           {"GiB", int64_t{1} << 30},
                                                           {"MiB", int64_t{1} << 20},
                                                           {"KiB", 1024}};
  for (const auto& [unit, size] : kUnits) {
    if (bytes >= size && bytes % size == 0) return std::to_string(bytes / size) + unit;
  }
  return std::to_string(bytes);
}

}  // namespace training
