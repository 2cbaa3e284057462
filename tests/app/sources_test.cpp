// Round 4 of the hostile pass (issue 39, docs/reliability.md): one source of truth per file, and
// outputs written as their formats say. Every test reproduced its case before the change that
// made it pass.
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "app/cli_support.h"
#include "training/platform/dir_lock.h"

namespace {

namespace fs = std::filesystem;
using cli::count_lines;
using cli::run_train;
using cli::write_tiny_config;

void replace_in(const fs::path& file, const std::string& from, const std::string& to) {
  std::string text = test_support::read_text(file);
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " in " << text;
  text.replace(at, from.size(), to);
  std::ofstream(file) << text;
}

// --resume ignored a hand-edited config.yaml and rewrote it from the checkpoint's copy without a
// word. The edit is now taken as --set takes it (and refused where --set would be), and a refused
// resume leaves the file as the user wrote it.
TEST(Sources, AResumeTakesTheHandEditedConfigAsSetWouldOrRefusesIt) {
  test_support::TempDir dir;
  const auto run = cli::finished_tiny_run(dir);
  replace_in(run / "config.yaml", "  epochs: 1\n", "  epochs: 2\n");
  auto r = run_train("--resume " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("training.epochs=2"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 2);
  EXPECT_NE(test_support::read_text(run / "config.yaml").find("  epochs: 2\n"), std::string::npos);

  replace_in(run / "config.yaml", "arch: resnet18", "arch: resnet34");
  const auto edited = test_support::read_text(run / "config.yaml");
  r = run_train("--resume " + run.string() + " --set training.epochs=3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(test_support::read_text(run / "config.yaml"), edited);
}

// `train --resume RUN --output-dir OTHER` trained the next epoch into OTHER alone, splitting the
// run's history; a run continues in its own directory.
TEST(Sources, AResumeIntoAnotherDirectoryIsRefused) {
  test_support::TempDir dir;
  const auto run = cli::finished_tiny_run(dir);
  const auto r = run_train("--resume " + run.string() + " --set training.epochs=2 --output-dir " +
                           (dir / "other").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("a resumed run continues in its own directory"), std::string::npos)
      << r.output;
  // Round 5: the advised command named a literal RUN; it names the run's own config.
  EXPECT_NE(r.output.find("from its config: --config " + (run / "config.yaml").string() +
                          " --output-dir " + (dir / "other").string()),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "other"));
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 1);
  // A hostile helper: --output-dir naming the run's own folder was advised a new run there,
  // which is refused in turn (it holds a run): the advice is to drop the flag.
  const auto itself = run_train("--resume " + run.string() + " --output-dir " + run.string());
  EXPECT_EQ(itself.code, 2) << itself.output;
  EXPECT_NE(itself.output.find("a resumed run continues in its own directory (" + run.string() +
                               "); drop --output-dir"),
            std::string::npos)
      << itself.output;
  // Twelfth pass: its checkpoint named from inside the run ("checkpoint.pt") gave "its own
  // directory ()", and a config path the shell could not find from there.
  const auto inside = cli::run_shell("cd " + run.string() + " && " + TRAIN_BINARY +
                                     " --resume checkpoint.pt --output-dir ../other");
  EXPECT_EQ(inside.code, 2) << inside.output;
  EXPECT_NE(inside.output.find("its own directory (.); drop it, or train a new run from its "
                               "config: --config ./config.yaml --output-dir ../other"),
            std::string::npos)
      << inside.output;
  // The tenth pass's F9 and the eleventh's: output.name or output.dir other than the run's, set
  // with --set, by another --config or by an edit of its config.yaml, was taken: the run trained
  // in its own folder, its config.yaml recording the other one. Its own values are no change.
  const std::string config_before = test_support::read_text(run / "config.yaml");
  std::ofstream(dir / "other.yaml")
      << test_support::read_text(write_tiny_config(dir)) << "output: {name: other}\n";
  for (const auto& [args, advice] : std::vector<std::pair<std::string, std::string>>{
           {" --set output.name=elsewhere", " --set output.name=elsewhere"},
           {" --set output.dir=" + dir.path().string(), " --set output.dir=" + dir.path().string()},
           {" --config " + (dir / "other.yaml").string(), " --set output.name=other"},
           // Sixteenth pass: a value typed back as YAML reads it ("runs #2" read back as "runs").
           {" --set 'output.dir=\"" + (dir / "runs #2").string() + "\"'",
            " --set 'output.dir=\"" + (dir / "runs #2").string() + "\"'"}}) {
    const auto named = run_train("--resume " + run.string() + " --set training.epochs=2" + args);
    EXPECT_EQ(named.code, 2) << args << ": " << named.output;
    EXPECT_EQ(count_lines(named.output), 1) << named.output;
    EXPECT_NE(named.output.find("a resumed run continues in its own directory (" + run.string() +
                                "); drop it, or train a new run from its config: --config " +
                                (run / "config.yaml").string() + advice),
              std::string::npos)
        << named.output;
  }
  replace_in(run / "config.yaml", "  name: \"\"", "  name: \"renamed\"");
  const auto edited = run_train("--resume " + run.string() + " --set training.epochs=2");
  EXPECT_EQ(edited.code, 2) << edited.output;
  EXPECT_NE(edited.output.find("'renamed', where the run recorded ''"), std::string::npos)
      << edited.output;
  std::ofstream(run / "config.yaml") << config_before;
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 1);
  const auto own = run_train("--resume " + run.string() + " --set training.epochs=2 --set " +
                             "output.dir=runs");  // the recorded one: no other folder
  EXPECT_EQ(own.code, 0) << own.output;
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 2);
}

// The tenth pass's F2, F3, F10: a run's folder named by output.dir / output.name was judged when
// it was claimed, after the layout's timing and auto's measurement (exit 2 after 2.4 s, or never:
// exit 3 "nothing fits" first), a resumed run's lock and metrics.jsonl too; and the refusal named
// --output-dir where none was given. Each is one line before any measurement, naming its key.
TEST(Sources, TheRunsFolderIsJudgedBeforeAnyMeasurementNamingWhatNamedIt) {
  test_support::TempDir dir;
  const auto run = cli::finished_tiny_run(dir);
  // A stop at the layout's timing (the tiny config's layout is auto): a refusal after it would be
  // exit 130, not the refusal.
  const std::string train = "TRAIN_TEST_STOP_AT='layout timing' " + std::string(TRAIN_BINARY);
  const std::string autos = " --set checkpointing.enabled=auto --memory-limit 400MiB";
  const auto config = write_tiny_config(dir).string();
  const std::string inside = " --set output.dir=" + (run / "config.yaml").string();
  for (const auto& [args, said] : std::vector<std::pair<std::string, std::string>>{
           {"--config " + config + autos + " --set output.dir=" + dir.path().string() +
                " --set output.name=run",
            run.string() + ": already holds a run; choose another output.name"},
           {"--config " + config + autos + inside, "[error] output.dir: "},
           {"--config " + config + autos + inside + " --set output.name=x",
            "[error] output.dir/output.name: "},
           {"sweep --batch-sizes 4 --config " + config + inside, "[error] output.dir: "},
           // fp32 alone: on a CPU without native bf16 the default settings add a warning line.
           {"memory --batch-size 4 --settings fp32 --config " + config + inside,
            "[error] output.dir: "}}) {
    const auto r = cli::run_shell(train + " " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find(said), std::string::npos) << args << ": " << r.output;
  }
  // A resume whose metrics.jsonl cannot be read back, or that another process holds.
  const std::string resume =
      train + " --resume " + run.string() + " --set training.epochs=2" + autos;
  replace_in(run / "metrics.jsonl", "\"test_acc\"", "\"test_accuracy\"");
  auto r = cli::run_shell(resume);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("metrics.jsonl row 1: column 'test_acc'"), std::string::npos) << r.output;
  replace_in(run / "metrics.jsonl", "\"test_accuracy\"", "\"test_acc\"");
  {
    const training::DirectoryLock held(run);  // this process: "another train process" to it
    r = cli::run_shell(resume);
  }
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find(": in use by another train process"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 1);
  // The eleventh pass: a file the resume rewrites that is a folder, a metrics.jsonl without the
  // checkpoint's epochs (metrics.csv was rewritten without them), and a checkpoint copied into a
  // folder that holds other things (it was made the run's, its files written beside them).
  fs::rename(run / "metrics.csv", dir / "metrics.csv");
  fs::create_directories(run / "metrics.csv");
  r = cli::run_shell(resume);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("metrics.csv: not a file, and a resume rewrites it"), std::string::npos)
      << r.output;
  fs::remove(run / "metrics.csv");
  fs::rename(dir / "metrics.csv", run / "metrics.csv");
  // Sixteenth pass: gpu.jsonl (or a plot) a folder lost the resumed epochs' samples (or left the
  // plots of the epochs before) without a word, found after training.
  for (const std::string name : {"gpu.jsonl", "loss_accuracy.png"}) {
    if (fs::exists(run / name)) fs::rename(run / name, dir / name);
    fs::create_directories(run / name);
    r = cli::run_shell(resume);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(name + ": not a file, and a resume rewrites it"), std::string::npos)
        << r.output;
    fs::remove(run / name);
    if (fs::exists(dir / name)) fs::rename(dir / name, run / name);
  }
  fs::rename(run / "metrics.jsonl", dir / "metrics.jsonl");
  r = cli::run_shell(resume);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("metrics.jsonl: holds 0 of the 1 epoch(s) its checkpoint has done"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.csv")), 2);  // header and row
  fs::rename(dir / "metrics.jsonl", run / "metrics.jsonl");
  const auto loose = dir / "loose";
  fs::create_directories(loose / "runs");
  std::ofstream(loose / "my.yaml") << "mine\n";
  std::ofstream(loose / ".train-write-probe-1");  // a killed probe's: bookkeeping, not named
  fs::copy_file(run / "checkpoint.pt", loose / "checkpoint.pt");
  r = cli::run_shell(train + " --resume " + (loose / "checkpoint.pt").string() +
                     " --set training.epochs=2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(loose.string() + ": holds what a run does not ("), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find(".train-write-probe"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(loose / ".train-output"));
  EXPECT_FALSE(fs::exists(loose / "config.yaml"));
  EXPECT_EQ(cli::run_shell(resume).code, 130);  // the same resume reaches the timing
}

// The tenth pass's F5, F6: a resume at another batch checked the profiler's window against a fresh
// run's steps (and after the layout's timing); with both caps reached the advice raised one.
TEST(Sources, AResumesStepsAreCountedFromItsCheckpointBeforeAnyMeasurement) {
  test_support::TempDir dir;
  const auto run = cli::finished_tiny_run(dir);  // 1 epoch of 4 steps at batch 32
  auto r = cli::run_shell("TRAIN_TEST_STOP_AT='layout timing' " + std::string(TRAIN_BINARY) +
                          " --resume " + run.string() +
                          " --set training.epochs=2 --set training.batch_size=16 --set "
                          "profiler.enabled=true --set profiler.steps=[13,14]");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;  // 4 done + 8 at batch 16: 12, not 16
  EXPECT_NE(r.output.find("the window starts at step 13, but this run makes 12 steps"),
            std::string::npos)
      << r.output;
  r = run_train("--resume " + run.string() + " --set training.max_steps=2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("all 1 epochs of training.epochs are trained and training.max_steps 2 "
                          "is reached (4 steps done); to train on, raise both (e.g. --set "
                          "training.epochs=11 --set training.max_steps=0)"),
            std::string::npos)
      << r.output;
}

// Round 5: a resume said "2 epochs of 2 steps (4 steps planned)" at start-up, then "6 steps planned
// in all": the start-up line leaves a resume's steps to the line that counts those done.
TEST(Sources, AResumeSaysItsStepsPlannedOnceCountingThoseDone) {
  test_support::TempDir dir;
  const auto run = cli::finished_tiny_run(dir);  // 1 epoch of 4 steps
  const auto r = run_train("--resume " + run.string() +
                           " --set training.epochs=2 --set training.accumulate_steps=2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2 epochs of 2 steps (the steps planned follow from the checkpoint)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("4 steps done; 6 steps planned in all"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" steps planned)"), std::string::npos) << r.output;
  // A cap already reached is said as the epochs are (it said "5 steps planned in all", then
  // "done" without a word).
  const auto capped =
      run_train("--resume " + run.string() + " --set training.epochs=3 --set training.max_steps=5");
  EXPECT_EQ(capped.code, 0) << capped.output;
  EXPECT_NE(capped.output.find("training.max_steps 5 is reached (6 steps done); to train on, raise "
                               "it or set it to 0 (no cap)"),
            std::string::npos)
      << capped.output;
}

// `train bench loader --config X.yaml --output X.yaml` replaced the config with its JSON (exit 0).
TEST(Sources, NoCommandWritesItsOutputOntoItsInput) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir);
  const auto before = test_support::read_text(config);
  for (const auto& output : {config.string(), (dir / "." / "tiny.yaml").string()}) {
    auto r =
        run_train("bench loader --config " + config.string() + " --batches 1 --output " + output);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find("--output: " + output + " is the --config file"), std::string::npos)
        << r.output;
    EXPECT_EQ(test_support::read_text(config), before);
  }
  const auto r =
      run_train("sweep-trial --config " + config.string() + " --result " + config.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(test_support::read_text(config), before);
}

// Twelfth pass: a bench's --output in a missing folder, or a file of the user's, was found when the
// result was written, after the measuring (the JSON line printed, then exit 2 naming no flag), or
// replaced. Refused in one line naming --output before anything runs; an earlier result is
// replaced.
TEST(Sources, ABenchsOutputIsJudgedBeforeItMeasures) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir).string();
  std::ofstream(dir / "notes.json") << "{}";
  for (const auto& [command, output, message] : std::vector<std::array<std::string, 3>>{
           {"bench loader --config " + config + " --batches 1", (dir / "missing/r.json").string(),
            "--output: " + (dir / "missing").string() + " does not exist"},
           {"bench loader --config " + config + " --batches 1", (dir / "notes.json").string(),
            " exists and is not a result of `train bench loader`"},
           {"bench matmul --size 8 --repeats 1", (dir / "notes.json").string(),
            " exists and is not a result of `train bench matmul`"}}) {
    const auto r = run_train(command + " --output " + output);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
  EXPECT_EQ(test_support::read_text(dir / "notes.json"), "{}");
  for (int i = 0; i < 2; ++i) {  // its own earlier result is replaced
    const auto r = run_train("bench loader --config " + config + " --batches 1 --output " +
                             (dir / "r.json").string());
    EXPECT_EQ(r.code, 0) << r.output;
  }
}

}  // namespace
