#include "training/platform/memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <regex>
#include <stdexcept>
#include <vector>

#include "training/platform/errors.h"

namespace training {

namespace {
thread_local bool host_data_scope = false;  // inside a HostData scope on this thread
const char* const kByteUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};

// The largest binary unit that keeps |bytes| >= 1 in it (TiB at most).
int byte_unit(int64_t bytes) {
  int unit = 0;
  for (double value = std::abs(static_cast<double>(bytes)); value >= 1024.0 && unit < 4;
       value /= 1024.0) {
    ++unit;
  }
  return unit;
}

// "1.50 GiB" at unit 3 and 2 decimals; plain bytes at unit 0.
std::string bytes_in(int64_t bytes, int unit, int decimals) {
  if (unit == 0) return std::to_string(bytes) + " B";
  return fmt::format("{:.{}f} {}", static_cast<double>(bytes) / std::pow(1024.0, unit), decimals,
                     kByteUnits[unit]);
}

// A size as written, in parts: its digits, its fraction's (where it has one) and its unit as
// typed; nullopt for any other form.
struct WrittenSize {
  std::string whole, fraction, unit;
  bool has_fraction = false;
};
std::optional<WrittenSize> written_size(const std::string& text) {
  // Bounded before the regex (libstdc++'s matcher recurses per character: 30000 digits crashed).
  if (text.size() > 64) return std::nullopt;
  // White space around it (YAML's block scalar ends with a line break), and at most one space
  // between the number and its unit ("23.54 GiB", as sizes are printed): "1\tGiB", "1\rGiB" and
  // "1  GiB" are no sizes.
  static const std::regex form(R"(^\s*([0-9]+)(?:\.([0-9]+))? ?([A-Za-z]*)\s*$)");
  std::smatch match;
  if (!std::regex_match(text, match, form)) return std::nullopt;
  return WrittenSize{match[1].str(), match[2].str(), match[3].str(), match[2].matched};
}

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
    const auto [already, limit_text] = format_bytes_apart(held - size, limit);  // never alike
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory (tracked): tried to allocate ",
                     format_bytes(size), " with ", already, " already held; limit ", limit_text);
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
    sizes_[data] = {size, made_++};
    if (timeline_) timeline_->add(size);
    if (trace_) trace_->allocated(data, size);
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
      size = found->second.size;
      self.sizes_.erase(found);
      if (self.timeline_) self.timeline_->add(-size);
      if (self.trace_) self.trace_->freed(data);
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

void TrackingCpuAllocator::set_trace(AllocationTrace* trace) {
  std::lock_guard<std::mutex> lock(sizes_mutex_);
  trace_ = trace;
  if (!trace) return;
  std::vector<std::pair<int64_t, std::pair<void*, int64_t>>> held;  // order, (address, size)
  for (const auto& [data, entry] : sizes_) held.push_back({entry.order, {data, entry.size}});
  std::sort(held.begin(), held.end());
  for (const auto& [order, allocation] : held)
    trace->allocated(allocation.first, allocation.second);
  trace->mark("held");
}

void TrackingCpuAllocator::reset_peak() {
  peak_.store(current_.load());
}

int64_t parse_byte_size(const std::string& text) {
  // Digits, an optional fraction and a unit, read exactly: no sign, exponent, hexadecimal,
  // infinity or NaN (which a floating-point reader takes). A fraction of a byte is dropped where
  // a unit is given (a figure the program prints, "23.54 GiB", is typed back), never without one.
  const std::string expected =
      "expected a size with its unit, like 12GiB, 512MiB or 1.5GB, got '" + one_line(text) + "'";
  if (text.size() > 64) {
    throw std::invalid_argument(
        "'" + one_line(text.substr(0, utf8_prefix(text.data(), text.size(), 24))) + "...' is " +
        std::to_string(text.size()) + " characters long, more than a size takes (64)");
  }
  const std::optional<WrittenSize> written = written_size(text);
  if (!written) throw std::invalid_argument(expected);
  // A number without its unit is told so first, whatever else it is (too many decimals, too large).
  if (const std::string bare = no_unit_refusal(text); !bare.empty()) {
    throw std::invalid_argument(bare);
  }
  const std::string too_large =
      "'" + one_line(text) + "' is more than 9e18 bytes, the largest size taken";
  std::string whole = written->whole, fraction = written->fraction;
  whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size() - 1));  // leading zeros
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
  if (whole.size() > 19 || (whole.size() == 19 && whole > "9000000000000000000")) {
    throw std::invalid_argument(too_large);  // and std::stoll below stays within int64
  }
  if (fraction.size() > 12) {
    throw std::invalid_argument("'" + one_line(text) + "' has more than 12 decimal places");
  }
  std::string unit = written->unit;
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, int64_t> kUnits[] = {{"", 1},
                                                           {"b", 1},
                                                           {"kib", 1LL << 10},
                                                           {"mib", 1LL << 20},
                                                           {"gib", 1LL << 30},
                                                           {"tib", 1LL << 40},
                                                           {"kb", 1000},
                                                           {"mb", 1000000},
                                                           {"gb", 1000000000},
                                                           {"tb", 1000000000000}};
  const auto known = std::find_if(std::begin(kUnits), std::end(kUnits),
                                  [&](const auto& u) { return unit == u.first; });
  if (known == std::end(kUnits)) throw std::invalid_argument(expected);
  if (std::stoll(whole) > static_cast<int64_t>(9.0e18) / known->second) {
    throw std::invalid_argument(too_large);  // before the arithmetic below could overflow
  }
  // The fraction's bytes, fraction / scale of a unit, rounded down: exact in 128 bits (below
  // 1e12 x 2^40), below one unit, so that the sum stays within int64.
  int64_t scale = 1;
  for (size_t i = 0; i < fraction.size(); ++i) scale *= 10;
  const int64_t bytes_per_unit = known->second;
  const int64_t parts = fraction.empty() ? 0 : std::stoll(fraction);
  const auto fraction_bytes = static_cast<int64_t>(static_cast<__int128>(parts) * bytes_per_unit /
                                                   static_cast<__int128>(scale));
  const int64_t bytes = std::stoll(whole) * bytes_per_unit + fraction_bytes;
  if (bytes > static_cast<int64_t>(9.0e18)) throw std::invalid_argument(too_large);
  return bytes;
}

std::string size_as_written(const std::string& text) {
  const std::optional<WrittenSize> written = written_size(text);
  if (!written) return text;
  std::string unit = written->unit;
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() == 3 && unit[1] == 'I') unit[1] = 'i';  // KiB, MiB, GiB, TiB
  return written->whole + (written->has_fraction ? "." + written->fraction : "") + unit;
}

std::string no_unit_refusal(const std::string& text, int64_t above, int64_t at_most,
                            const std::vector<std::string>& more) {
  const std::optional<WrittenSize> written = written_size(text);
  const bool zero = written && written->whole.find_first_not_of('0') == std::string::npos &&
                    written->fraction.find_first_not_of('0') == std::string::npos;
  if (!written || !written->unit.empty() || zero) return "";
  const std::string number =
      written->whole + (written->has_fraction ? "." + written->fraction : "");
  std::vector<std::string> meant;
  for (const char* unit : {"GiB", "MiB", "B"}) {
    try {
      const int64_t bytes = parse_byte_size(number + unit);
      if (bytes > above && bytes <= at_most) meant.push_back(number + unit);
    } catch (const std::invalid_argument&) {
    }
  }
  meant.insert(meant.end(), more.begin(), more.end());
  std::string forms;
  for (const auto& form : meant) forms += (forms.empty() ? "" : " or ") + form;
  return "'" + number + "' has no unit; " +
         (forms.empty() ? "give one, e.g. 24GiB" : "did you mean " + forms + "?");
}

int64_t size_flag(const std::string& flag, const std::string& text) {
  try {
    const int64_t bytes = parse_byte_size(text);
    if (bytes > 0) return bytes;
  } catch (const std::invalid_argument& e) {
    throw UserError(flag + ": " + e.what());
  }
  throw UserError(flag + ": expected a size above 0, got '" + one_line(text) + "'");
}

std::string mib_text(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", to_mib(bytes));
  return text;
}

std::string format_bytes(int64_t bytes) {
  return bytes_in(bytes, byte_unit(bytes), 2);
}

std::pair<std::string, std::string> format_bytes_apart(int64_t a, int64_t b) {
  const auto texts = format_bytes_apart(std::vector<int64_t>{a, b});
  return {texts[0], texts[1]};
}

std::vector<std::string> format_bytes_apart(const std::vector<int64_t>& sizes) {
  const auto apart = [&sizes](const std::vector<std::string>& texts) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (size_t j = i + 1; j < sizes.size(); ++j) {
        if (sizes[i] != sizes[j] && texts[i] == texts[j]) return false;
      }
    }
    return true;
  };
  std::vector<std::string> texts;
  for (const int64_t size : sizes) texts.push_back(format_bytes(size));
  if (apart(texts)) return texts;
  int64_t largest = 0;
  for (const int64_t size : sizes) largest = std::max(largest, std::abs(size));
  const int unit = byte_unit(largest);
  for (int decimals = 2; unit > 0 && decimals <= 6; ++decimals) {
    for (size_t i = 0; i < sizes.size(); ++i) texts[i] = bytes_in(sizes[i], unit, decimals);
    if (apart(texts)) return texts;
  }
  for (size_t i = 0; i < sizes.size(); ++i) texts[i] = bytes_in(sizes[i], 0, 0);
  return texts;
}

std::string byte_size_text(int64_t bytes) {
  static const std::pair<const char*, int64_t> kUnits[] = {{"TiB", int64_t{1} << 40},
                                                           {"GiB", int64_t{1} << 30},
                                                           {"MiB", int64_t{1} << 20},
                                                           {"KiB", 1024}};
  for (const auto& [unit, size] : kUnits) {
    if (bytes >= size && bytes % size == 0) return std::to_string(bytes / size) + unit;
  }
  return std::to_string(bytes) + "B";
}

std::string size_at_least_text(int64_t bytes, int64_t at_most) {
  bytes = std::max<int64_t>(bytes, 1);
  for (const int64_t unit : {kMiB, int64_t{1024}}) {
    const int64_t rounded = (bytes + unit - 1) / unit * unit;
    if (at_most <= 0 || rounded <= at_most) return byte_size_text(rounded);
  }
  return byte_size_text(bytes);
}

}  // namespace training
