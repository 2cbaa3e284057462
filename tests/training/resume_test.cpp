#include "training/resume.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/run/checkpoint_io.h"
#include "training/run/output_dir.h"
#include "training/run/run_dir.h"

namespace {

namespace fs = std::filesystem;

// A checkpoint of ResNet-18 storing `inputs`, in `dir`.
fs::path checkpoint_storing(const fs::path& dir, const training::RunInputs& inputs) {
  auto config =
      training::parse_config(inputs.config_yaml, "stored", {}, training::ConfigRead::Record);
  config.checkpointing.mode(training::CheckpointMode::Off);  // the same weights, no blocks needed
  auto parts = training::build_step_parts(config, torch::kCPU);
  const fs::path file = dir / "checkpoint.pt";
  training::save_checkpoint(file, *parts.model, *parts.optimizer, {}, inputs);
  return file;
}

const std::string kModel = "model: {arch: resnet18}\ntraining: {device: cpu, batch_size: 4}\n";

TEST(Resume, TheCheckpointsDecisionsAreReadBackAndADamagedEntryIsNamed) {
  test_support::TempDir dir;
  training::Decisions made;
  made.layout = training::LayoutDecision{c10::MemoryFormat::ChannelsLast, "cpu", "timed", ""};
  const auto file = checkpoint_storing(dir.path(), {kModel, training::decisions_json(made)});
  training::Decisions recorded;
  const auto config = training::effective_config({}, {dir.path(), file}, recorded);
  EXPECT_FALSE(config.training.memory_format);  // auto, as asked
  ASSERT_TRUE(recorded.layout);
  EXPECT_EQ(recorded.layout->format, c10::MemoryFormat::ChannelsLast);

  const auto damaged = checkpoint_storing(dir.path(), {kModel, "{\"memory_format\": 3}"});
  try {
    training::effective_config({}, {dir.path(), damaged}, recorded);
    ADD_FAILURE() << "a damaged decisions entry was taken";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              damaged.string() +
                  " (stored decisions): memory_format: expected an object, got "
                  "number; to resume without them, set training.memory_format (--set), which "
                  "they decide");
  }
  // That way round works (the last pass found none): the layout set, the damaged entry unused.
  training::TrainRequest request;
  request.overrides = {training::Override("training.memory_format=channels_last", "--set")};
  const auto set = training::effective_config(request, {dir.path(), damaged}, recorded);
  EXPECT_EQ(set.training.memory_format, c10::MemoryFormat::ChannelsLast);
  EXPECT_FALSE(recorded.layout);
}

// The config is what was asked, so a resume may switch auto to on with one --set (round 4: three
// refusals, one per recorded key, each blaming the checkpoint's stored config); the recorded
// choice is then dropped, not applied.
TEST(Resume, AutoSwitchedToOnByOneSetDropsTheRecordedChoice) {
  test_support::TempDir dir;
  training::Decisions made;
  made.checkpointing = training::CheckpointingDecision{{"layer1.0"}, "a step", 1 << 20, 900, 1};
  const auto file = checkpoint_storing(
      dir.path(), {kModel + "checkpointing: {enabled: auto}\n", training::decisions_json(made)});
  training::TrainRequest request;
  request.overrides = {"checkpointing.enabled=on"};
  training::Decisions recorded;
  const auto config = training::effective_config(request, {dir.path(), file}, recorded);
  EXPECT_EQ(config.checkpointing.mode(), training::CheckpointMode::On);
  ASSERT_TRUE(recorded.checkpointing);
  EXPECT_FALSE(training::resolve_checkpointing(config, recorded, torch::kCPU, false));
  EXPECT_FALSE(recorded.checkpointing);
  EXPECT_FALSE(training::decided(config, recorded).checkpointing.blocks());
}

// With --config a resume still keeps the checkpoint's decisions (they were dropped: the layout was
// timed again and the blocks measured again); without decisions.json, train report reads them
// from the checkpoint (it said "no block recomputed").
TEST(Resume, TheCheckpointsDecisionsHoldWithConfigAndWithoutDecisionsJson) {
  test_support::TempDir dir;
  training::Decisions made;
  made.layout = training::LayoutDecision{c10::MemoryFormat::ChannelsLast, "cpu", "timed", ""};
  made.checkpointing = training::CheckpointingDecision{{"layer1.0"}, "a step", 1 << 20, 900, 1};
  const auto file = checkpoint_storing(dir.path(), {kModel, training::decisions_json(made)});
  std::ofstream(dir / "other.yaml") << kModel;
  training::TrainRequest request;
  request.config_path = (dir / "other.yaml").string();
  training::Decisions recorded;
  training::effective_config(request, {dir.path(), file}, recorded);
  EXPECT_EQ(training::decisions_json(recorded), training::decisions_json(made));
  EXPECT_EQ(training::decisions_json(
                training::read_decisions(dir.path(), training::parse_config(kModel, "kModel"))),
            training::decisions_json(made));
}

// --resume of a folder: only a run train claimed and stopped before its config.yaml is advised to
// start again (a folder the user made, empty or holding other files, was told the same); the
// advice's path is one shell word.
TEST(Resume, AFolderThatIsNoRunIsSaidToBeNoneAndAdviceQuotesItsPath) {
  test_support::TempDir dir;
  auto refusal = [](const fs::path& folder) {
    try {
      training::resume_target(folder.string());
    } catch (const training::UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const fs::path empty = dir / "empty";
  fs::create_directories(empty);
  const fs::path other = dir / "photos";
  fs::create_directories(other);
  std::ofstream(other / "notes.txt") << "mine\n";
  for (const auto& folder : {empty, other}) {
    EXPECT_EQ(refusal(folder), folder.string() +
                                   ": not a run written by train (no .train-output marker in "
                                   "it); --resume takes a run's folder, or a checkpoint file")
        << folder;
  }
  const fs::path claimed = dir / "my run";
  { auto lock = training::claim_output_dir(claimed, training::OutputKind::Run, "--output-dir"); }
  EXPECT_EQ(refusal(claimed), claimed.string() +
                                  ": stopped before it wrote its config.yaml (no checkpoint.pt "
                                  "either): nothing to resume; start it again with --config FILE "
                                  "--output-dir '" +
                                  claimed.string() + "'");
  EXPECT_EQ(training::shell_word("runs/rn50-cpu_2"), "runs/rn50-cpu_2");
  EXPECT_EQ(training::shell_word("it's"), "'it'\\''s'");
  EXPECT_EQ(training::shell_word(""), "''");
}

// A run an earlier build named with a blank at an end (" r1"), or with only blanks or invisible
// characters, before such names were refused, is read back by report, compare and --resume (with
// or without --config) as it was named: a record's own name names a folder that exists. A name
// given for a new folder, or a flag's on a record, is judged as before.
TEST(Resume, ARecordsOwnNameIsReadAsNamedAndOnlyANewNameIsJudged) {
  auto error_of = [](const std::function<void()>& read) {
    try {
      read();
    } catch (const training::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  for (const auto& [name, refused] : std::vector<std::pair<std::string, std::string>>{
           {" r1",
            "output.name: expected a folder name that starts and ends with a visible character, "
            "got ' r1'"},
           {"   ", "output.name: expected a string that is not only blanks, got '   '"},
           {"\u200b", "output.name: expected a string that is not only blanks, got '\\u200b'"}}) {
    test_support::TempDir dir;
    const std::string yaml = kModel + "output: {name: \"" + name + "\"}\n";
    const auto file = checkpoint_storing(dir.path(), {yaml, ""});
    std::ofstream(dir / "config.yaml") << training::run_yaml(
        training::parse_config(yaml, "earlier", {}, training::ConfigRead::Record));
    const std::string named =
        training::parse_config(yaml, "earlier", {}, training::ConfigRead::Record).output.name;
    training::Decisions recorded;
    EXPECT_EQ(training::effective_config({}, {dir.path(), file}, recorded).output.name, named);
    training::TrainRequest with_config;  // --resume RUN --config RUN/config.yaml
    with_config.config_path = (dir / "config.yaml").string();
    EXPECT_EQ(training::effective_config(with_config, {dir.path(), file}, recorded).output.name,
              named);
    const auto inputs = training::recorded_inputs(dir.path());  // report's and compare's reading
    EXPECT_EQ(inputs.asked.output.name, named);
    EXPECT_EQ(inputs.note, "");

    EXPECT_EQ(error_of([&] { training::parse_config(yaml, "c.yaml"); }), "c.yaml: " + refused);
    training::TrainRequest fresh;  // a new run from the record's config
    fresh.config_path = with_config.config_path;
    EXPECT_NE(error_of([&] { training::effective_config(fresh, {}, recorded); }), "accepted");
    EXPECT_EQ(error_of([&] {
                training::parse_config(yaml, "c.yaml", {"output.name=\"" + name + "\""},
                                       training::ConfigRead::Record);
              }),
              "--set output.name: " + refused);
    // A run without a checkpoint resumed with --config: that file is new input, not the record.
    fs::remove(file);
    EXPECT_EQ(error_of([&] {
                training::effective_config(with_config, {dir.path(), {}}, recorded);
              }),
              with_config.config_path + ": " + refused);
  }
}

}  // namespace
