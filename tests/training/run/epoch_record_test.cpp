#include "training/run/epoch_record.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "training/platform/errors.h"

namespace {

training::EpochRecord row(int epoch, double loss) {
  training::EpochRecord r;
  r.epoch = epoch;
  r.train_loss = loss;
  return r;
}

TEST(EpochRecord, ReadsBackWhatItWritesAndNamesAMissingColumn) {
  auto record = row(3, 0.5);
  record.peak_reserved_bytes = 123;
  record.utilization_mean = 0.25;
  const auto back = training::epoch_record_from_json(training::to_json(record), "m.jsonl row 1");
  EXPECT_EQ(training::to_json(back), training::to_json(record));
  EXPECT_FALSE(back.grad_scale.has_value());
  auto json = training::to_json(record);
  json.erase("test_acc");
  try {
    training::epoch_record_from_json(json, "m.jsonl row 1");
    FAIL() << "a row without test_acc was read";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.jsonl row 1: column 'test_acc' is missing or not a value of its type (written "
              "by another version of train?)");
  }
}

// A run's metrics read back are checked as the trainer wrote them (issue 57): `train report` of a
// hand-edited row printed a test accuracy of 700.00% and a time to accuracy of "0:-2", and a step
// of 8.5 was read as 8. Each value is one line naming the file's row, the column and the range.
TEST(EpochRecord, AValueTheTrainerCannotHaveWrittenIsRefusedNamingTheColumn) {
  const std::vector<std::pair<std::string, nlohmann::json>> bad = {
      {"test_acc", 7},
      {"train_acc", -0.1},
      {"epoch_seconds", -3},
      {"step", 8.5},
      {"epoch", 0},
      {"world_size", 0},
      {"accumulate_steps", 0},
      {"data_wait_fraction", 1.5},
      {"peak_allocated_bytes", -1},
      {"batches", 2.5},
      {"test_acc", nullptr},
      {"lr", nullptr},
      {"steady_images_per_second", -1.0}};
  for (const auto& [key, value] : bad) {
    auto json = training::to_json(row(3, 0.5));
    json[key] = value;
    try {
      training::epoch_record_from_json(json, "m.jsonl row 1");
      ADD_FAILURE() << key << " = " << value.dump() << " was read";
    } catch (const training::UserError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("m.jsonl row 1: " + key + ": " + value.dump() + " is not ", 0), 0u)
          << message;
    }
  }
  auto json = training::to_json(row(3, 0.5));
  json["test_acc"] = 1;  // the edges are what a trainer writes
  json["train_loss"] = -2.5;
  EXPECT_NO_THROW(training::epoch_record_from_json(json, "m.jsonl row 1"));
}

// Every column is read back: a row without one (another version's) is refused naming it.
TEST(EpochRecord, ARowWithoutAColumnIsRefusedNamingIt) {
  auto json = training::to_json(row(2, 0.5));
  json.erase("warmup_steps");
  try {
    training::epoch_record_from_json(json, "old.jsonl row 1");
    ADD_FAILURE() << "a row without warmup_steps was read";
  } catch (const training::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("old.jsonl row 1: column 'warmup_steps' is missing"),
              std::string::npos)
        << e.what();
  }
}

// A whole epoch's time is measured; a stopped one is its time plus the missing batches at the
// steady rate, marked projected; without a steady step there is nothing to project from.
TEST(EpochRecord, EpochTimeIsMeasuredOrProjectedFromTheSteadyRate) {
  training::EpochRecord r;
  r.epoch_seconds = 10;
  r.images_per_second = 64;  // 640 images in 10 batches of 64
  r.batches = r.epoch_batches = 10;
  auto time = training::epoch_time(r);
  ASSERT_TRUE(time.has_value());
  EXPECT_FALSE(time->projected);
  EXPECT_DOUBLE_EQ(time->seconds, 10.0);
  r.epoch_batches = 100;  // 90 batches missing, 5760 images at 128 images/s: 45 s more
  r.warmup_steps = 5;
  r.steady_images_per_second = 128;
  time = training::epoch_time(r);
  ASSERT_TRUE(time.has_value());
  EXPECT_TRUE(time->projected);
  EXPECT_DOUBLE_EQ(time->seconds, 55.0);
  EXPECT_EQ(time->steady_steps, 5);
  r.steady_images_per_second.reset();
  EXPECT_FALSE(training::epoch_time(r).has_value());
  r.epoch_batches = 0;  // a row from before the columns: its measured time
  EXPECT_DOUBLE_EQ(training::epoch_time(r)->seconds, 10.0);
}

// The first epoch at or above each threshold, with the training and evaluation time up to its end.
TEST(EpochRecord, AccuracyCrossingsAreTheFirstEpochAtEachThreshold) {
  std::vector<training::EpochRecord> rows(3);
  const double accuracy[] = {0.5, 0.92, 0.91};
  for (int i = 0; i < 3; ++i) {
    rows[i].epoch = i + 1;
    rows[i].step = 10 * (i + 1);
    rows[i].test_acc = accuracy[i];
    rows[i].epoch_seconds = 10;
    rows[i].eval_seconds = 1;
  }
  const auto crossings = training::accuracy_crossings(rows, {0.5, 0.9, 0.95});
  ASSERT_EQ(crossings.size(), 2u);  // 95% never reached
  EXPECT_EQ(crossings[0].epoch, 1);
  EXPECT_DOUBLE_EQ(crossings[0].seconds, 11.0);
  EXPECT_EQ(crossings[1].epoch, 2);
  EXPECT_EQ(crossings[1].step, 20);
  EXPECT_DOUBLE_EQ(crossings[1].seconds, 22.0);
}

}  // namespace
