// Rows of flat JSON objects, the form of every tabular output (metrics.jsonl, gpu.jsonl,
// sweep.csv): reading JSON lines and fields as written, writing CSV, optional values as null.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace training {

// The JSON objects of a .jsonl file, one per non-empty line; UserError naming the file and line
// for a line that is not JSON. A missing file has no rows.
std::vector<nlohmann::ordered_json> read_jsonl(const std::filesystem::path& file);

// A value that may be absent: its value, or null (rows keep every key either way).
template <class T>
nlohmann::ordered_json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json();
}

// An error met reading a file's JSON back, as one line naming the field: nlohmann's own prefix
// ("[json.exception.out_of_range.403] key 'x' not found") said as "x: missing".
std::string json_error_text(const std::exception& error);

// `json[key]` as a T, else std::out_of_range naming the field ("source: missing", "source: type
// must be string, but is number").
template <typename T>
T read_as(const nlohmann::json& json, const char* key) {
  if (!json.is_object() || !json.contains(key)) {
    throw std::out_of_range(std::string(key) + ": missing");
  }
  try {
    return json.at(key).template get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw std::out_of_range(std::string(key) + ": " + json_error_text(e));
  }
}

// `json[key]` as its writer wrote it: a T (whole for an integral T) in [`low`, `high`] (a NaN is
// not), else std::out_of_range naming the field (nlohmann's own where it is missing).
template <typename T>
T read_at_least(const nlohmann::json& json, const char* key, T low,
                T high = std::numeric_limits<T>::max()) {
  const auto& field = json.at(key);
  const bool whole = field.is_number_integer() &&
                     !(field.is_number_unsigned() &&
                       field.template get<uint64_t>() > static_cast<uint64_t>(INT64_MAX));
  if (std::is_integral_v<T> ? !whole : !field.is_number()) {
    throw std::out_of_range(std::string(key) + ": " + field.dump() + " is not " +
                            (std::is_integral_v<T> ? "a whole number" : "a number") +
                            " as written");
  }
  const T value = field.template get<T>();
  if (!(value >= low && value <= high)) {
    const bool no_end =
        high == std::numeric_limits<T>::max() ||
        (std::numeric_limits<T>::has_infinity && high == std::numeric_limits<T>::infinity());
    std::ostringstream expected;
    expected << (no_end ? "at least " : "within [") << low;
    if (!no_end) expected << ", " << high << "]";
    throw std::out_of_range(std::string(key) + ": " + json.at(key).dump() + " is not " +
                            expected.str());
  }
  return value;
}

// CSV text for rows of flat JSON objects: the header is the union of keys in first-seen order.
std::string rows_to_csv(const std::vector<nlohmann::ordered_json>& rows);

}  // namespace training
