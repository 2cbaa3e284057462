#include "training/run/output_file.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "training/platform/errors.h"
#include "training/run/output_dir.h"

namespace {

namespace fs = std::filesystem;

// Twelfth pass: `train bench loader --output` and `bench matmul --output` found a folder in the
// file's place, a missing folder or a file as its folder when the result was written, after the
// measuring (exit 2 naming no flag), and replaced any existing file. One check for every file
// output, before anything runs: an earlier output of the same command is replaced, nothing else.
TEST(OutputFile, AFileOutputIsJudgedBeforeAnythingRuns) {
  test_support::TempDir dir;
  fs::create_directories(dir / "folder");
  std::ofstream(dir / "file") << "mine";
  std::ofstream(dir / "earlier.json") << R"({"ours": true})";
  std::ofstream(dir / "notes.json") << R"({"theirs": true})";
  const auto ours = [](const fs::path& file) {
    return training::json_file_where(file,
                                     [](const nlohmann::json& j) { return j.contains("ours"); });
  };
  const auto refusal = [&](const fs::path& file) {
    try {
      training::check_output_file(file, "--output", ours, "an earlier result");
    } catch (const training::UserError& e) {
      return std::string(e.what());
    }
    return std::string("taken");
  };
  EXPECT_EQ(refusal(dir / "folder"),
            "--output: " + (dir / "folder").string() + " is a folder; give a file name");
  EXPECT_EQ(refusal(dir / "missing/r.json"),
            "--output: " + (dir / "missing").string() +
                " does not exist; give a path in an existing folder");
  EXPECT_EQ(refusal(dir / "file/r.json"),
            "--output: " + (dir / "file").string() +
                " is not a folder; give a path in an existing folder");
  // A link to nothing: written where it points, in a folder that must exist.
  fs::create_symlink(dir / "missing/r.json", dir / "link.json");
  EXPECT_EQ(refusal(dir / "link.json"),
            "--output: " + (dir / "missing").string() + " (where the link " +
                (dir / "link.json").string() +
                " points) does not exist; give a path in an existing folder");
  EXPECT_EQ(refusal(dir / "notes.json"), "--output: " + (dir / "notes.json").string() +
                                             " exists and is not an earlier result (an earlier "
                                             "one is replaced, nothing else); give another path");
  EXPECT_EQ(refusal(dir / "file"), "--output: " + (dir / "file").string() +
                                       " exists and is not an earlier result (an earlier one is "
                                       "replaced, nothing else); give another path");
  EXPECT_EQ(refusal(dir / "earlier.json"), "taken");
  EXPECT_EQ(refusal(dir / "new.json"), "taken");
  EXPECT_EQ(refusal("/dev/null"), "taken");    // written into, never replaced
  EXPECT_EQ(refusal("/dev/stdout"), "taken");  // a link to a pipe or a terminal: written into
  EXPECT_EQ(refusal(dir / "r.json/"),
            "--output: " + (dir / "r.json/").string() + " ends in '/'; give a file name");
  // A link to nothing is judged where it points: inside another command's folder it is refused.
  { auto lock = training::claim_output_dir(dir / "run", training::OutputKind::Run, "-o"); }
  fs::create_symlink(dir / "run/new.json", dir / "into-run.json");
  EXPECT_NE(refusal(dir / "into-run.json").find("which holds a run"), std::string::npos)
      << refusal(dir / "into-run.json");
  EXPECT_EQ(refusal("").rfind("--output: expected a file", 0), 0u);
  EXPECT_EQ(refusal("/proc/r.json").rfind("--output: /proc/r.json: cannot write in /proc (", 0),
            0u);
  EXPECT_EQ(test_support::read_text(dir / "notes.json"), R"({"theirs": true})");
  EXPECT_FALSE(fs::exists(dir / "new.json"));
}

// Round 5, a sixth pass: a file output (--snapshot, plan's --json) inside the folder the same
// command claims with --output-dir, existing and empty, was written among its files. Refused at
// any depth, whether the folder exists or not, however the paths are spelt; beside it is taken.
TEST(OutputFile, AFileInsideTheCommandsOwnOutputDirIsRefused) {
  test_support::TempDir dir;
  fs::create_directories(dir / "study/sub");
  auto refusal = [&](const fs::path& file, const fs::path& own) {
    try {
      training::check_file_outside_own_output(file, "--snapshot", own);
    } catch (const training::UserError& e) {
      return std::string(e.what());
    }
    return std::string("taken");
  };
  for (const fs::path& file :
       {dir / "study/s.pickle", dir / "study/sub/s.pickle", dir / "study/../study/s.pickle"}) {
    EXPECT_EQ(refusal(file, dir / "study"),
              "--snapshot: " + file.string() + " is inside " + (dir / "study").string() +
                  ", the folder --output-dir gives this command; give a path outside it");
  }
  EXPECT_NE(refusal(dir / "new/s.pickle", dir / "new"), "taken");  // not created yet
  EXPECT_NE(refusal(dir / "study/s.pickle", dir / "study/"), "taken");
  EXPECT_EQ(refusal(dir / "s.pickle", dir / "study"), "taken");
  EXPECT_EQ(refusal(dir / "study.pickle", dir / "study"), "taken");
  EXPECT_EQ(refusal(dir / "study/s.pickle", ""), "taken");  // no --output-dir: none claimed
}

}  // namespace
