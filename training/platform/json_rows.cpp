#include "training/platform/json_rows.h"

#include <algorithm>
#include <fstream>

#include "training/platform/errors.h"

namespace training {

using nlohmann::ordered_json;

namespace {

// A cell as RFC 4180 writes it: quoted, its quotes doubled, when it holds a comma, a quote or a
// line break (an out-of-memory message, a JSON list of blocks).
std::string csv_text(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string csv_cell(const ordered_json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return csv_text(value.get<std::string>());
  return csv_text(value.dump());
}

}  // namespace

std::string json_error_text(const std::exception& error) {
  std::string text(error.what());
  text = text.substr(0, text.find('\n'));
  if (text.rfind("[json.exception.", 0) == 0 && text.find("] ") != std::string::npos) {
    text = text.substr(text.find("] ") + 2);
  }
  const std::string key = "key '", missing = "' not found";
  if (text.rfind(key, 0) == 0 && text.size() > key.size() + missing.size() &&
      text.compare(text.size() - missing.size(), missing.size(), missing) == 0) {
    return text.substr(key.size(), text.size() - key.size() - missing.size()) + ": missing";
  }
  return text;
}

std::vector<ordered_json> read_jsonl(const std::filesystem::path& file) {
  std::vector<ordered_json> rows;
  std::ifstream in(file);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    try {
      rows.push_back(ordered_json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      throw UserError(file.string() + ": line " + std::to_string(number) + " is not JSON (" +
                      json_error_text(e) + ")");
    }
  }
  return rows;
}

std::string rows_to_csv(const std::vector<ordered_json>& rows) {
  std::vector<std::string> columns;
  for (const auto& row : rows) {
    for (const auto& item : row.items()) {
      if (std::find(columns.begin(), columns.end(), item.key()) == columns.end()) {
        columns.push_back(item.key());
      }
    }
  }
  std::ostringstream out;
  for (size_t i = 0; i < columns.size(); ++i) out << (i ? "," : "") << csv_text(columns[i]);
  out << "\n";
  for (const auto& row : rows) {
    for (size_t i = 0; i < columns.size(); ++i) {
      out << (i ? "," : "") << (row.contains(columns[i]) ? csv_cell(row[columns[i]]) : "");
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace training
