#include "training/run/output_dir.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "training/platform/errors.h"

namespace {

namespace fs = std::filesystem;
using training::OutputKind;

std::string refusal(const fs::path& dir, OutputKind kind) {
  try {
    static_cast<void>(training::claim_output_dir(dir, kind, "--output-dir"));
  } catch (const training::UserError& e) {
    return e.what();
  }
  return "claimed";
}

// Folders written before the marker are recognised by their files.
TEST(OutputDir, SaysWhatAFolderHolds) {
  test_support::TempDir dir;
  EXPECT_FALSE(training::held_outputs(dir / "absent").kind);
  EXPECT_FALSE(training::held_outputs(dir.path()).kind);
  std::ofstream(dir / "metrics.jsonl") << "";
  EXPECT_EQ(training::held_outputs(dir.path()).kind, OutputKind::Run);
  std::ofstream(dir / "sweep.json") << "{}";
  EXPECT_EQ(training::held_outputs(dir.path()).kind, OutputKind::Sweep);
  EXPECT_TRUE(training::held_outputs(dir.path()).finished);
}

// Only a folder's own command writes into it; an unfinished study is started again, a finished one
// is not; a run is continued, not started again, unless it never started.
TEST(OutputDir, OnlyItsOwnCommandWritesIntoAFolder) {
  test_support::TempDir dir;
  EXPECT_EQ(refusal(dir / "study", OutputKind::MemoryStudy), "claimed");
  EXPECT_EQ(
      refusal(dir / "study", OutputKind::Comparison),
      (dir / "study").string() + ": already holds a memory study; choose another --output-dir");
  EXPECT_EQ(refusal(dir / "study", OutputKind::MemoryStudy), "claimed");  // unfinished: again
  training::mark_finished(dir / "study", OutputKind::MemoryStudy);
  EXPECT_NE(refusal(dir / "study", OutputKind::MemoryStudy), "claimed");
  EXPECT_THROW(training::check_is_run(dir / "study"), training::UserError);

  EXPECT_EQ(refusal(dir / "run", OutputKind::Run), "claimed");
  EXPECT_EQ(refusal(dir / "run", OutputKind::Run), "claimed");  // never started (no config.yaml)
  std::ofstream(dir / "run/config.yaml") << "{}";
  EXPECT_EQ(refusal(dir / "run", OutputKind::Run),
            (dir / "run").string() + ": already holds a run; choose another --output-dir or " +
                "continue it with --resume " + (dir / "run").string());
  EXPECT_NO_THROW(training::check_is_run(dir / "run"));

  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine/report.md") << "my notes";
  EXPECT_EQ(refusal(dir / "mine", OutputKind::Run),
            (dir / "mine").string() +
                ": holds files that are not a run (report.md); choose a new or empty --output-dir");
}

}  // namespace
