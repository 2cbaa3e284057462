#include "training/platform/tensorboard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "test_support.h"
#include "training/platform/errors.h"

namespace {

namespace fs = std::filesystem;

#define TENSORBOARD_OR_SKIP() \
  if (!training::tensorboard_built()) GTEST_SKIP() << "built without protobuf / Boost.CRC"

// CRC-32C's published check value: the CRC of "123456789" is 0xE3069283; TFRecord masks it.
TEST(TensorBoard, MaskedCrc32cOfTheCheckString) {
  TENSORBOARD_OR_SKIP();
  const uint32_t crc = 0xE3069283u;
  const uint32_t masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
  EXPECT_EQ(training::masked_crc32c("123456789", 9), masked);
}

fs::path only_event_file(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) return entry;
  }
  return {};
}

// The records of a file, each checked as TFRecord frames it: length, masked CRC of the length,
// bytes, masked CRC of the bytes.
size_t count_records(const std::string& bytes) {
  size_t offset = 0, records = 0;
  while (offset < bytes.size()) {
    if (offset + 12 > bytes.size()) {
      ADD_FAILURE() << "torn header at byte " << offset;
      break;
    }
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, bytes.data() + offset, 8);
    std::memcpy(&length_crc, bytes.data() + offset + 8, 4);
    EXPECT_EQ(training::masked_crc32c(bytes.data() + offset, 8), length_crc);
    if (offset + 12 + length + 4 > bytes.size()) {
      ADD_FAILURE() << "torn record at byte " << offset;
      break;
    }
    std::memcpy(&data_crc, bytes.data() + offset + 12 + length, 4);
    EXPECT_EQ(training::masked_crc32c(bytes.data() + offset + 12, length), data_crc);
    offset += 12 + length + 4;
    ++records;
  }
  return records;
}

TEST(TensorBoard, RecordsAreFramedAndChecksummed) {
  TENSORBOARD_OR_SKIP();
  test_support::TempDir dir;
  {
    training::EventWriter writer(dir.path());
    writer.add_scalars(3, {{"train/loss", 2.5}});
    writer.flush();
  }
  const std::string bytes = test_support::read_text(only_event_file(dir.path()));
  EXPECT_EQ(count_records(bytes), 2u);  // the file version, then the scalar
  EXPECT_NE(bytes.find("train/loss"), std::string::npos);
}

// A resumed run starts after the last step the earlier files hold; a torn last record (a killed
// run) ends the reading of its file without an error.
TEST(TensorBoard, TheLastStepSurvivesATornRecordAndResumedStepsAreNotRepeated) {
  TENSORBOARD_OR_SKIP();
  test_support::TempDir dir;
  EXPECT_EQ(training::last_event_step(dir.path()), -1);
  {
    training::EventWriter writer(dir.path());
    writer.add_scalars(3, {{"train/loss", 2.5}});
    writer.add_scalars(7, {{"train/loss", 2.0}});
    writer.flush();
  }
  const fs::path first = only_event_file(dir.path());
  std::ofstream(first, std::ios::app | std::ios::binary) << std::string("\x30\x00\x00", 3);
  EXPECT_EQ(training::last_event_step(dir.path()), 7);

  const fs::path other = dir / "other";
  fs::create_directories(other);
  {
    training::EventWriter writer(other, /*skip_through=*/7);
    writer.add_scalars(5, {{"train/loss", 9.0}});  // already in the earlier file: dropped
    writer.add_scalars(9, {{"train/loss", 1.5}});
    writer.flush();
  }
  EXPECT_EQ(training::last_event_step(other), 9);
  EXPECT_EQ(count_records(test_support::read_text(only_event_file(other))), 2u);  // version, 9
}

TEST(TensorBoard, AnUnwritableDirectoryIsABadInput) {
  TENSORBOARD_OR_SKIP();
  test_support::TempDir dir;
  EXPECT_THROW(training::EventWriter(dir / "missing" / "deeper"), training::UserError);
}

}  // namespace
