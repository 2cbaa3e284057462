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

}  // namespace
