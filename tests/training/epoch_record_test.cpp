#include "training/epoch_record.h"

#include <gtest/gtest.h>

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
