// TensorBoard event files (`events.out.tfevents.<seconds>.<host>.<pid>`): protobuf Events
// (tensorboard_event.proto) in TFRecord framing (length, 8 bytes little-endian, its masked CRC-32C,
// the bytes, their masked CRC-32C). Readers tolerate a torn last record: a killed run loses at most
// what was not flushed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace training {

// protobuf and Boost.CRC were found at configure time.
bool tensorboard_built();

// TFRecord's check: CRC-32C of `size` bytes, rotated right by 15 bits plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

using Scalars = std::vector<std::pair<std::string, double>>;

// The largest step of any scalar in the event files of `dir` (-1 when there are none): whether a
// run directory holds an earlier session. A torn or unreadable record ends the reading of its
// file; files that are not regular files (a FIFO) are not read.
int64_t last_event_step(const std::filesystem::path& dir);

// The scalars TensorBoard shows at `step` from the event files of `dir`, as its reader keeps
// them: the files in the order written, a restart (start_session) at or before `step` dropping
// what earlier files hold there, a later value of a tag replacing an earlier one.
Scalars scalars_at(const std::filesystem::path& dir, int64_t step);

class EventWriter {
 public:
  // Creates a new event file in `dir` (its first record names the format version). Throws
  // UserError naming the file when it cannot be created.
  explicit EventWriter(const std::filesystem::path& dir);

  // TensorBoard's convention for a restart (a resumed run): a SessionLog START at `step`, after
  // which its reader drops what earlier files hold at `step` and later; the resumed run writes
  // those steps again, so the event files agree with metrics.jsonl.
  void start_session(int64_t step);

  // One Event at `step` holding every value (tag, value as float32).
  void add_scalars(int64_t step, const Scalars& scalars);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);

  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace training
