#include "training/run/compare_runs.h"

#include <gtest/gtest.h>

#include <sstream>

namespace {

// Sixteenth pass: a run folder named "p|q" split compare.md's heading into four cells over a
// separator of three, and a value holding '|' (a data root) would split its row: each '|' in a
// cell is escaped, so every row has the heading's cells.
TEST(CompareRuns, ACellHoldingABarKeepsTheTableWhole) {
  training::ComparedRun a, b;
  a.name = "p|q";
  b.name = "c1";
  a.config["data.root"] = "/data/a|b";
  b.config["data.root"] = "/data/c";
  for (auto* run : {&a, &b}) {
    training::EpochRecord e;
    e.epoch = 1;
    e.step = 4;
    e.device = "cpu";
    run->epochs.push_back(e);
  }
  const std::string md = training::compare_markdown({a, b});
  EXPECT_NE(md.find("| | p\\|q | c1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("/data/a\\|b"), std::string::npos) << md;
  std::istringstream lines(md);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("|", 0) != 0) continue;
    size_t bars = 0;
    for (size_t i = 0; i < line.size(); ++i)
      bars += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
    EXPECT_EQ(bars, 4u) << line;
  }
}

}  // namespace
