#include "training/platform/tensorboard.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

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

// The last step of the earlier files says whether a run directory holds an earlier session; a
// torn last record (a killed run) ends the reading of its file without an error, and a FIFO named
// like an event file is not opened (it would block the reading for ever).
TEST(TensorBoard, TheLastStepSurvivesATornRecordAndAFifoIsNotRead) {
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
  ASSERT_EQ(::mkfifo((dir / "events.out.tfevents.0.fifo.1").c_str(), 0644), 0);
  EXPECT_EQ(training::last_event_step(dir.path()), 7);
}

// A restart is TensorBoard's SessionLog START (Event field 7, status 1) at its step, one record.
TEST(TensorBoard, ARestartIsASessionStartRecord) {
  TENSORBOARD_OR_SKIP();
  test_support::TempDir dir;
  {
    training::EventWriter writer(dir.path());
    writer.start_session(5);
  }
  const std::string bytes = test_support::read_text(only_event_file(dir.path()));
  EXPECT_EQ(count_records(bytes), 2u);  // the file version, then the session start
  // The last record's payload ends with the session_log field (field 7, length 2) holding
  // status = START (field 1, varint 1).
  EXPECT_NE(bytes.find(std::string("\x3a\x02\x08\x01", 4)), std::string::npos);
}

TEST(TensorBoard, AnUnwritableDirectoryIsABadInput) {
  TENSORBOARD_OR_SKIP();
  test_support::TempDir dir;
  EXPECT_THROW(training::EventWriter(dir / "missing" / "deeper"), training::UserError);
}

}  // namespace
