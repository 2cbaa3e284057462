#include "training/platform/json_rows.h"

#include <gtest/gtest.h>

namespace {

TEST(JsonRows, CsvUnionsColumnsInFirstSeenOrder) {
  nlohmann::ordered_json a, b;
  a["epoch"] = 1;
  a["x"] = "s";
  b["epoch"] = 2;
  b["y"] = nullptr;
  b["x"] = 3;
  EXPECT_EQ(training::rows_to_csv({a, b}), "epoch,x,y\n1,s,\n2,3,\n");
}

}  // namespace
