#include "training/config/decisions.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "training/platform/errors.h"

namespace {

using training::Decisions;

Decisions both() {
  Decisions d;
  d.layout =
      training::LayoutDecision{c10::MemoryFormat::ChannelsLast, "cpu", "auto: timed", "a step"};
  d.checkpointing = training::CheckpointingDecision{
      {"layer1.0", "layer3.2"}, "resnet18 ...", 1 << 20, 900, 12.5, 4096};
  return d;
}

std::string decisions_error(const std::string& json) {
  try {
    training::parse_decisions(json, "run/decisions.json");
  } catch (const training::UserError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Decisions, ReadBackAsWritten) {
  const Decisions back =
      training::parse_decisions(training::decisions_json(both()), "run/decisions.json");
  ASSERT_TRUE(back.layout);
  EXPECT_EQ(back.layout->format, c10::MemoryFormat::ChannelsLast);
  EXPECT_EQ(back.layout->device_type, "cpu");
  EXPECT_EQ(back.layout->reason, "auto: timed");
  EXPECT_EQ(back.layout->chosen_for, "a step");
  ASSERT_TRUE(back.checkpointing);
  EXPECT_EQ(back.checkpointing->blocks, (std::vector<std::string>{"layer1.0", "layer3.2"}));
  EXPECT_EQ(back.checkpointing->chosen_for, "resnet18 ...");
  EXPECT_EQ(back.checkpointing->budget, 1 << 20);
  EXPECT_EQ(back.checkpointing->predicted_peak, 900);
  EXPECT_DOUBLE_EQ(back.checkpointing->predicted_extra_ms, 12.5);
  EXPECT_EQ(back.checkpointing->beside_bytes, 4096);
  EXPECT_EQ(training::decisions_json({}), "{}\n");
  const Decisions none = training::parse_decisions("{}", "run/decisions.json");
  EXPECT_FALSE(none.layout || none.checkpointing);
}

TEST(Decisions, ADamagedFileIsRefusedNamingItAndTheEntry) {
  EXPECT_EQ(decisions_error("{\"memory_format\": "),
            "run/decisions.json: expected a JSON object of decisions (memory_format, "
            "checkpointing), got text that is not JSON");
  EXPECT_EQ(decisions_error("[]"),
            "run/decisions.json: expected a JSON object of decisions (memory_format, "
            "checkpointing), got array");
  EXPECT_EQ(decisions_error("{\"layout\": {}}"),
            "run/decisions.json: unknown decision 'layout' (expected memory_format or "
            "checkpointing)");
  EXPECT_EQ(decisions_error("{\"memory_format\": {\"layout\": \"nhwc\", \"device_type\": \"cpu\", "
                            "\"reason\": \"\"}}"),
            "run/decisions.json: memory_format.layout: expected contiguous or channels_last, got "
            "nhwc");
  auto j = nlohmann::json::parse(training::decisions_json(both()));
  j["checkpointing"]["predicted_peak_bytes"] = -1;
  EXPECT_EQ(decisions_error(j.dump()),
            "run/decisions.json: checkpointing.predicted_peak_bytes: expected a byte count, got "
            "-1");
  j["checkpointing"].erase("predicted_peak_bytes");
  EXPECT_EQ(decisions_error(j.dump()),
            "run/decisions.json: checkpointing.predicted_peak_bytes: expected a byte count, "
            "missing");
  j = nlohmann::json::parse(training::decisions_json(both()));
  j["checkpointing"]["beside_step_bytes"] = "1MiB";  // the round-5 fields are input too
  EXPECT_EQ(decisions_error(j.dump()),
            "run/decisions.json: checkpointing.beside_step_bytes: expected a byte count, got "
            "\"1MiB\"");
  j = nlohmann::json::parse(training::decisions_json(both()));
  j["memory_format"]["chosen_for"] = 7;
  EXPECT_EQ(decisions_error(j.dump()),
            "run/decisions.json: memory_format.chosen_for: expected a string, got 7");
  j = nlohmann::json::parse(training::decisions_json(both()));
  j["checkpointing"]["budget"] = 5;  // a misspelt field is refused, not dropped
  EXPECT_EQ(decisions_error(j.dump()),
            "run/decisions.json: checkpointing.budget: unknown field (expected blocks, chosen_for, "
            "budget_bytes, predicted_peak_bytes, predicted_extra_ms, beside_step_bytes, from_step, "
            "cheaper_from_bytes, decides)");
  j = nlohmann::json::parse(training::decisions_json(both()));
  j["checkpointing"]["cheaper_from_bytes"] = -1;
  EXPECT_EQ(decisions_error(j.dump()),
            "run/decisions.json: checkpointing.cheaper_from_bytes: expected a byte count, got -1");
  j = nlohmann::json::parse(training::decisions_json(both()));
  j["checkpointing"]["from_step"] = -1;
  EXPECT_EQ(decisions_error(j.dump()),
            "run/decisions.json: checkpointing.from_step: expected a number of steps, got -1");
  j = nlohmann::json::parse(training::decisions_json(both()));
  j["checkpointing"]["blocks"] = {"layer1.0", 3};
  EXPECT_NE(decisions_error(j.dump()).find("checkpointing.blocks: expected a list of block names"),
            std::string::npos);
}

// Recorded blocks the model has not (or listed twice) are refused naming where they came from,
// not met as an internal error once the run has started.
TEST(Decisions, RecordedBlocksAreCheckedAgainstTheModel) {
  const auto config = training::parse_config("model: {arch: resnet18}\n", "c.yaml");
  Decisions d = both();  // layer3.2: a block of ResNet-50, not of ResNet-18
  EXPECT_NO_THROW(training::check_decisions(d, training::parse_config("", "c.yaml"), "ck.pt"));
  EXPECT_THROW(training::check_decisions(d, config, "ck.pt"), training::UserError);
  d.checkpointing->blocks = {"layer9.9"};
  try {
    training::check_decisions(d, config, "ck.pt");
    ADD_FAILURE() << "layer9.9 was taken";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "ck.pt: checkpointing.blocks: 'layer9.9' is not a block of resnet18 (layer1.0 ... "
              "layer4.1)");
  }
  d.checkpointing->blocks = {"layer1.0", "layer1.0"};
  EXPECT_THROW(training::check_decisions(d, config, "ck.pt"), training::UserError);
}

TEST(Decisions, TakeThePlaceOfAutoOnly) {
  auto asked = training::parse_config("checkpointing: {enabled: auto}\n", "c.yaml");
  const auto run = training::decided(asked, both());
  EXPECT_EQ(run.training.memory_format, c10::MemoryFormat::ChannelsLast);
  EXPECT_EQ(run.checkpointing.blocks(), both().checkpointing->blocks);
  // A layout or blocks that the config gives stay as given.
  asked = training::parse_config(
      "training: {memory_format: contiguous}\n"
      "checkpointing: {enabled: auto, blocks: [layer2.0]}\n",
      "c.yaml");
  const auto given = training::decided(asked, both());
  EXPECT_EQ(given.training.memory_format, c10::MemoryFormat::Contiguous);
  EXPECT_EQ(given.checkpointing.blocks(), (std::vector<std::string>{"layer2.0"}));
}

}  // namespace
