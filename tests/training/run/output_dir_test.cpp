#include "training/run/output_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <vector>

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

// Only the marker says a folder's kind and format: files alone are no output of ours, and a marker
// of another format is refused in one line where the folder is read back.
TEST(OutputDir, TheMarkerSaysTheKindAndTheFormat) {
  test_support::TempDir dir;
  EXPECT_FALSE(training::held_outputs(dir / "absent").kind);
  EXPECT_FALSE(training::held_outputs(dir.path()).kind);
  std::ofstream(dir / "metrics.jsonl") << "";
  EXPECT_FALSE(training::held_outputs(dir.path()).kind);
  EXPECT_EQ(training::held_outputs(dir.path()).other_files,
            (std::vector<std::string>{"metrics.jsonl"}));
  EXPECT_THROW(training::check_output_format(dir.path(), OutputKind::Run), training::UserError);
  std::ofstream(dir / ".train-output") << "run finished\n";  // format 1 wrote no number
  const auto older = training::held_outputs(dir.path());
  EXPECT_EQ(older.kind, OutputKind::Run);
  EXPECT_EQ(older.format, 1);
  EXPECT_TRUE(older.finished);
  try {
    training::check_output_format(dir.path(), OutputKind::Run);
    ADD_FAILURE() << "format 1 was read";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()), dir.path().string() +
                                         ": written by another version of train (output format "
                                         "1, this build reads " +
                                         std::to_string(training::output_format(OutputKind::Run)) +
                                         ")");
  }
  EXPECT_THROW(training::check_is_run(dir.path()), training::UserError);
  for (const std::string marker : {"run 2x\n", "run 99999999999999999999\n", "run -2\n"}) {
    std::ofstream(dir / ".train-output") << marker;
    EXPECT_EQ(training::held_outputs(dir.path()).format, 0) << marker;
    EXPECT_THROW(training::check_output_format(dir.path(), OutputKind::Run), training::UserError);
  }
  // A marker that is there but is none of train's is said so; a FIFO in its place is not read
  // (the read would block).
  for (const std::string junk : {"RUN 2\n", "\x01\x02\n"}) {
    std::ofstream(dir / ".train-output") << junk;
    try {
      training::check_output_format(dir.path(), OutputKind::Run);
      ADD_FAILURE() << junk;
    } catch (const training::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("its .train-output marker is not one train writes"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(training::check_is_run(dir.path()), training::UserError);
  }
  fs::remove(dir / ".train-output");
  ASSERT_EQ(::mkfifo((dir / ".train-output").c_str(), 0644), 0);
  EXPECT_TRUE(training::held_outputs(dir.path()).marker);
  EXPECT_FALSE(training::held_outputs(dir.path()).kind);
  const test_support::TempDir fresh;
  { auto lock = training::claim_output_dir(fresh.path(), OutputKind::Sweep, "--output-dir"); }
  EXPECT_EQ(test_support::read_text(fresh / ".train-output"),
            "sweep " + std::to_string(training::output_format(OutputKind::Sweep)) + "\n");
  training::mark_finished(fresh.path(), OutputKind::Sweep);
  EXPECT_TRUE(training::held_outputs(fresh.path()).finished);
  EXPECT_EQ(training::held_outputs(fresh.path()).format,
            training::output_format(OutputKind::Sweep));
  EXPECT_NO_THROW(training::check_output_format(fresh.path(), OutputKind::Sweep));
  EXPECT_THROW(training::check_output_format(fresh.path(), OutputKind::Run), training::UserError);
}

// A kind's format is raised with its own files only: format 3 renamed a key of the sweep section,
// which only a sweep's and a memory study's config.yaml hold, so a run of format 2 (its
// config.yaml without a sweep section) is still resumed, reported and compared, while a sweep of
// format 2 is refused.
TEST(OutputDir, AKindsFormatChangesWithItsOwnFilesOnly) {
  test_support::TempDir dir;
  std::ofstream(dir / ".train-output") << "run 2\n";
  EXPECT_NO_THROW(training::check_is_run(dir.path()));
  std::ofstream(dir / ".train-output") << "comparison 2 finished\n";
  EXPECT_NO_THROW(training::check_output_format(dir.path(), OutputKind::Comparison));
  for (const std::string kind : {"sweep", "memory-study"}) {
    std::ofstream(dir / ".train-output") << kind << " 2 finished\n";
    const auto held = training::held_outputs(dir.path());
    ASSERT_TRUE(held.kind) << kind;
    EXPECT_EQ(held.format, 2);
    EXPECT_THROW(training::check_output_format(dir.path(), *held.kind), training::UserError)
        << kind;
  }
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

// A dangling symbolic link said "cannot create the folder (File exists)": it names the link's
// target now.
TEST(OutputDir, ADanglingLinkIsNamedWithItsTarget) {
  test_support::TempDir dir;
  fs::create_directory_symlink(dir / "gone", dir / "link");
  EXPECT_EQ(refusal(dir / "link", OutputKind::Sweep),
            (dir / "link").string() + ": is a symbolic link to " + (dir / "gone").string() +
                ", which does not exist; create it or choose another --output-dir");
}

// Issue 51, the eighth pass: `--output-dir FILE` (an existing file) was refused as "FILE: cannot
// create the folder (FILE is not a folder)", without the flag the other refusals name.
TEST(OutputDir, AFolderThatCannotBeCreatedNamesTheFlag) {
  test_support::TempDir dir;
  std::ofstream(dir / "a-file") << "not a folder";
  for (const auto& path : {dir / "a-file", dir / "a-file" / "below"}) {
    EXPECT_EQ(refusal(path, OutputKind::Run), "--output-dir: " + path.string() +
                                                  ": cannot create the folder (" +
                                                  (dir / "a-file").string() + " is not a folder)");
  }
  fs::create_symlink(dir / "nowhere", dir / "dangling");
  EXPECT_EQ(refusal(dir / "dangling" / "sub", OutputKind::Sweep).rfind("--output-dir: ", 0), 0u);
}

// Round 5: outputs written inside another command's folder (a plan's --json in a sweep's trials/,
// removed when the sweep ran again; a run inside a run), and paths no file can be written at (a
// name above 255 bytes, a loop of links: refused only after the measuring, the loop said as a
// missing target) are refused before anything is written, for folders and for files alike.
TEST(OutputDir, APathInsideAnotherOutputOrUnwritableIsRefusedFirst) {
  test_support::TempDir dir;
  EXPECT_EQ(refusal(dir / "sweep", OutputKind::Sweep), "claimed");
  fs::create_directories(dir / "sweep/trials");
  const std::string inside = " is inside " + (dir / "sweep").string() +
                             ", which holds a sweep (only its own command writes there); give a "
                             "path outside it";
  EXPECT_EQ(refusal(dir / "sweep/trials/run", OutputKind::Run),
            "--output-dir: " + (dir / "sweep/trials/run").string() + inside);
  try {
    training::check_file_outside_outputs(dir / "sweep/trials/plan.json", "--json");
    ADD_FAILURE() << "a file was let into a sweep's trials/";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--json: " + (dir / "sweep/trials/plan.json").string() + inside);
  }
  const std::string long_name(300, 'a');
  EXPECT_EQ(refusal(dir / long_name / "run", OutputKind::Run),
            "--output-dir: " + (dir / long_name / "run").string() +
                ": a name in it is 300 bytes long, more than the 255 a file system takes");
  EXPECT_THROW(training::check_file_outside_outputs(dir / (long_name + ".json"), "--json"),
               training::UserError);
  fs::create_directory_symlink(dir / "loopB", dir / "loopA");
  fs::create_directory_symlink(dir / "loopA", dir / "loopB");
  for (const fs::path& path : {dir / "loopA", dir / "loopA/x"}) {
    EXPECT_EQ(refusal(path, OutputKind::Run), "--output-dir: " + path.string() + ": " +
                                                  (dir / "loopA").string() +
                                                  " is a loop of symbolic links");
  }
  EXPECT_FALSE(fs::exists(dir / "sweep/trials/run"));
  // Round 5, a sixth pass: a folder that takes no file (/proc here; /sys, a read-only mount) was
  // found when the file was written, after the measuring, leaving an unfinished study behind.
  EXPECT_EQ(refusal("/proc/train-test/run", OutputKind::Run)
                .rfind("--output-dir: /proc/train-test/run: cannot write in /proc (", 0),
            0u);
  try {
    training::check_file_outside_outputs("/proc/plan.json", "--json");
    ADD_FAILURE() << "a file in /proc was let through";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--json: /proc/plan.json: cannot write in /proc (", 0),
              0u)
        << e.what();
  }
  training::check_file_outside_outputs(dir / "plan.json", "--json");  // tried, and left nothing
  EXPECT_EQ(refusal(dir / "fresh", OutputKind::Run), "claimed");
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().rfind(".train-write-probe", 0), std::string::npos);
  }
}

// A sweep, study or comparison started again in a stopped one's folder starts afresh: nothing of
// the stopped attempt (trials, tables, temporaries) is left to be read back as this one's.
TEST(OutputDir, AStudyStartedAgainRemovesTheStoppedAttemptsFiles) {
  test_support::TempDir dir;
  const auto sweep = dir / "sweep";
  ASSERT_EQ(refusal(sweep, OutputKind::Sweep), "claimed");
  fs::create_directories(sweep / "trials");
  std::ofstream(sweep / "trials/001.json") << "{}";
  std::ofstream(sweep / "trials/.003.yaml.tmp5") << "half";
  std::ofstream(sweep / "sweep.json") << "{}";
  std::ofstream(sweep / ".sweep.csv.tmp9") << "half";
  ASSERT_EQ(refusal(sweep, OutputKind::Sweep), "claimed");  // unfinished: started again
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(sweep)) {
    left.push_back(entry.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".lock", ".train-output"}));
}

}  // namespace
