#include "training/config/setting.h"

#include <gtest/gtest.h>

#include <stdexcept>

using training::CheckpointMode;
using training::Precision;
using training::Setting;

TEST(Setting, LabelsRoundTripTheirSpelling) {
  for (const std::string text : {"fp32", "bf16+checkpointing", "fp16+channels_last",
                                 "bf16+checkpointing+channels_last", "fp32+checkpointing=auto"}) {
    const auto setting = Setting::parse(text);
    ASSERT_TRUE(setting) << text;
    EXPECT_EQ(setting->label(), text);
  }
  EXPECT_EQ(Setting::parse("bf16+checkpointing")->precision, Precision::BF16);
  EXPECT_EQ(Setting::parse("fp32+checkpointing=auto")->checkpointing, CheckpointMode::Auto);
  for (const std::string bad :
       {"", "fp64", "bf16+", "fp32+checkpointing+checkpointing", "fp32+nope", "checkpointing",
        "+fp32", "fp32+checkpointing+checkpointing=auto", "fp32+checkpointing=on"}) {
    EXPECT_FALSE(Setting::parse(bad)) << bad;
  }
}

TEST(Setting, JsonRoundTripsAndNamesTheFieldItRefuses) {
  const Setting setting{Precision::FP16, CheckpointMode::Auto, c10::MemoryFormat::ChannelsLast, 4};
  EXPECT_EQ(Setting::from_json(setting.json()), setting);
  EXPECT_EQ(setting.json().at("checkpointing"), "auto");
  EXPECT_EQ(Setting{}.json().at("checkpointing"), false);
  auto bad = setting.json();
  bad["precision"] = "fp7";
  try {
    Setting::from_json(bad);
    FAIL() << "fp7 was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("precision: 'fp7'"), std::string::npos) << e.what();
  }
  bad = setting.json();
  bad["accumulate_steps"] = 0;
  EXPECT_THROW(Setting::from_json(bad), std::invalid_argument);
}

// The flags a setting stands for set what apply_to sets: every key, so that `train` takes it as
// the study measured it.
TEST(Setting, ItsFlagsSetWhatItAppliesToAConfig) {
  const Setting setting{Precision::BF16, CheckpointMode::On, c10::MemoryFormat::ChannelsLast, 2};
  training::Config config;
  setting.apply_to(config);
  EXPECT_EQ(config.training.precision, Precision::BF16);
  EXPECT_EQ(config.training.memory_format, c10::MemoryFormat::ChannelsLast);
  EXPECT_EQ(config.checkpointing.mode(), CheckpointMode::On);
  EXPECT_EQ(config.training.accumulate_steps, 2);
  EXPECT_EQ(setting.set_flags(16),
            "--set training.batch_size=16 --set training.precision=bf16 --set "
            "training.memory_format=channels_last --set checkpointing.enabled=on --set "
            "training.accumulate_steps=2");
  EXPECT_EQ(Setting{}.set_flags(8).find("accumulate_steps"), std::string::npos);
  EXPECT_NE(Setting{}.set_flags(8, true).find("accumulate_steps=1"), std::string::npos);
}

TEST(Setting, OnlyCheckpointingAutoCannotBePredictedOnACard) {
  EXPECT_EQ(Setting{}.unpredictable(), "");
  EXPECT_EQ((Setting{Precision::FP32, CheckpointMode::On}).unpredictable(), "");
  EXPECT_NE((Setting{Precision::FP32, CheckpointMode::Auto}).unpredictable(), "");
  // The settings it offers instead are spelt as --settings takes them (thirteenth pass: "predict
  // checkpointing off or on").
  const Setting in_bf16{Precision::BF16, CheckpointMode::Auto, c10::MemoryFormat::ChannelsLast};
  const std::string why = in_bf16.unpredictable();
  EXPECT_NE(why.find("; predict bf16+channels_last (checkpointing off) or "
                     "bf16+checkpointing+channels_last (every block recomputed)"),
            std::string::npos)
      << why;
  for (const char* label : {"bf16+channels_last", "bf16+checkpointing+channels_last"})
    EXPECT_TRUE(Setting::parse(label).has_value()) << label;
}
