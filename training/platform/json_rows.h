// Rows of flat JSON objects, the form of every tabular output (metrics.jsonl, gpu.jsonl,
// sweep.csv): reading JSON lines, writing CSV, optional values as null.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
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

// CSV text for rows of flat JSON objects: the header is the union of keys in first-seen order.
std::string rows_to_csv(const std::vector<nlohmann::ordered_json>& rows);

}  // namespace training
