#include "training/run/compare_runs.h"

#include <gtest/gtest.h>

#include <sstream>

#include "training/platform/errors.h"

namespace {

// A run of one epoch on the CPU, named `name`.
training::ComparedRun run_named(const std::string& name) {
  training::ComparedRun run;
  run.name = name;
  training::EpochRecord e;
  e.epoch = 1;
  e.step = 4;
  e.device = "cpu";
  run.epochs.push_back(e);
  return run;
}

// Sixteenth pass: a run folder named "p|q" split compare.md's heading into four cells over a
// separator of three, and a value holding '|' (a data root) would split its row: each '|' in a
// cell is escaped, so every row has the heading's cells.
TEST(CompareRuns, ACellHoldingABarKeepsTheTableWhole) {
  training::ComparedRun a = run_named("p|q"), b = run_named("c1");
  a.config["data.root"] = "/data/a|b";
  b.config["data.root"] = "/data/c";
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

// Sixteenth pass: a run named "*s*" or "e`f`" was rendered as emphasis or code in compare.md (and
// report.md's title): every character markdown reads as markup is escaped, the text shown as named.
TEST(CompareRuns, ARunsNameIsShownAsNamedNotAsMarkup) {
  EXPECT_EQ(
      training::markdown_text("*s* e`f` [l](u) <b> ~x~ &amp; _i_ \\ a|b\nc snake_case\rd x #"),
      "\\*s\\* e\\`f\\` [l\\](u) \\<b> \\~x\\~ \\&amp; \\_i\\_ \\\\ a\\|b c snake_case d x \\#");
  const training::ComparedRun a = run_named("*s*"), b = run_named("e`f`");
  const std::string md = training::compare_markdown({a, b});
  EXPECT_NE(md.find("| | \\*s\\* | e\\`f\\` |"), std::string::npos) << md;
}

}  // namespace
