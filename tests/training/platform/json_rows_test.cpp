#include "training/platform/json_rows.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "test_support.h"
#include "training/platform/atomic_file.h"

namespace {

// Twelfth pass: a field missing from sweep.json was said in nlohmann's words ("trials[0].[json.
// exception.out_of_range.403] key 'images_per_second' not found").
TEST(JsonRows, AReadBackErrorNamesTheFieldInPlainWords) {
  const nlohmann::json row = {{"a", 1}};
  try {
    static_cast<void>(row.at("images_per_second"));
    ADD_FAILURE();
  } catch (const std::exception& e) {
    EXPECT_EQ(training::json_error_text(e), "images_per_second: missing");
  }
  try {
    static_cast<void>(row.at("a").get<std::string>());
    ADD_FAILURE();
  } catch (const std::exception& e) {
    EXPECT_EQ(training::json_error_text(e).rfind("type must be string", 0), 0u)
        << training::json_error_text(e);
  }
  EXPECT_EQ(training::json_error_text(std::out_of_range("batch_size: 0 is not at least 1")),
            "batch_size: 0 is not at least 1");
  // A value of another type names its field (the review: "trials[0].type must be string").
  const nlohmann::json trial = {{"source", 5}};
  try {
    static_cast<void>(training::read_as<std::string>(trial, "source"));
    ADD_FAILURE();
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), "source: type must be string, but is number");
  }
  try {
    static_cast<void>(training::read_as<std::string>(trial, "arch"));
    ADD_FAILURE();
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), "arch: missing");
  }
}

TEST(JsonRows, CsvUnionsColumnsInFirstSeenOrder) {
  nlohmann::ordered_json a, b;
  a["epoch"] = 1;
  a["x"] = "s";
  b["epoch"] = 2;
  b["y"] = nullptr;
  b["x"] = 3;
  EXPECT_EQ(training::rows_to_csv({a, b}), "epoch,x,y\n1,s,\n2,3,\n");
}

// Round 4: sweep.csv (and metrics.csv, written by the same helper) quoted no cell: a message with
// commas or a JSON list of blocks split into more fields than the header has. Read back by
// Python's csv module, every row has the header's fields and every cell its value.
TEST(JsonRows, CsvQuotesAsRfc4180SaysAndReadsBackWithACsvReader) {
  nlohmann::ordered_json row;
  row["trial"] = 1;
  row["message"] = "out of memory on cpu: peak 1.2 GiB, limit 1 GiB (memory.limit). \"Remedies\"";
  row["recomputed_blocks"] = nlohmann::ordered_json::array({"layer1.0", "layer2.1"});
  row["note"] = "two\nlines";
  row["plain"] = "x";
  test_support::TempDir dir;
  training::write_file_atomically(dir / "t.csv", training::rows_to_csv({row, row}));
  const std::string read =
      std::string(TEST_PYTHON) +
      " -c \"import csv, json, sys; rows = list(csv.reader(open(sys.argv[1], newline=''))); "
      "print(json.dumps(rows))\" " +
      (dir / "t.csv").string();
  FILE* pipe = popen(read.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  ASSERT_EQ(pclose(pipe), 0) << output;
  const auto rows = nlohmann::json::parse(output);
  ASSERT_EQ(rows.size(), 3u) << output;
  EXPECT_EQ(rows[0], nlohmann::json({"trial", "message", "recomputed_blocks", "note", "plain"}));
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_EQ(rows[i].size(), 5u) << output;
    EXPECT_EQ(rows[i][1].get<std::string>(), row["message"].get<std::string>());
    EXPECT_EQ(nlohmann::json::parse(rows[i][2].get<std::string>()).dump(),
              row["recomputed_blocks"].dump());
    EXPECT_EQ(rows[i][3], "two\nlines");
    EXPECT_EQ(rows[i][4], "x");
  }
}

}  // namespace
