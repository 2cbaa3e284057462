#include "data/cifar10_binary.h"

#include <algorithm>
#include <cstring>
#include <fstream>

namespace data {

namespace fs = std::filesystem;

std::vector<fs::path> binary_batch_files(const fs::path& dir, bool train) {
  if (!train) return {dir / "test_batch.bin"};
  std::vector<fs::path> files;
  for (int i = 1; i <= 5; ++i) files.push_back(dir / ("data_batch_" + std::to_string(i) + ".bin"));
  return files;
}

namespace {

// The file's size once it is known to be a non-empty run of whole records; DataError naming the
// file otherwise.
int64_t checked_size(const fs::path& file) {
  std::error_code ec;
  const auto status = fs::status(file, ec);
  if (ec && status.type() != fs::file_type::not_found) {
    throw DataError(file.string() + ": " + ec.message());  // a loop of links, no permission
  }
  if (!fs::exists(status) && fs::is_symlink(fs::symlink_status(file, ec))) {
    throw DataError(file.string() + ": a symbolic link to nothing (its target " +
                    fs::read_symlink(file, ec).string() + " does not exist)");
  }
  if (!fs::exists(status)) throw DataError(file.string() + ": file not found");
  if (fs::is_directory(status)) {
    throw DataError(file.string() + ": is a folder, expected a CIFAR-10 binary batch file");
  }
  if (!fs::is_regular_file(status)) {
    throw DataError(file.string() + ": is not a regular file (a device, pipe or socket), " +
                    "expected a CIFAR-10 binary batch file");
  }
  const auto bytes = fs::file_size(file, ec);
  if (ec) throw DataError(file.string() + ": cannot read size: " + ec.message());
  if (bytes % kBinaryRecordBytes != 0) {
    throw DataError(file.string() + ": size " + std::to_string(bytes) +
                    " bytes is not a whole number of " + std::to_string(kBinaryRecordBytes) +
                    "-byte records (truncated or not a CIFAR-10 binary batch)");
  }
  if (bytes == 0) throw DataError(file.string() + ": empty file, expected CIFAR-10 records");
  return static_cast<int64_t>(bytes);
}

std::vector<char> read_whole_file(const fs::path& file) {
  const auto bytes = static_cast<size_t>(checked_size(file));
  std::vector<char> buffer(bytes);
  std::ifstream in(file, std::ios::binary);
  if (!in.read(buffer.data(), static_cast<std::streamsize>(bytes))) {
    throw DataError(file.string() + ": read failed after " + std::to_string(in.gcount()) +
                    " bytes");
  }
  return buffer;
}

}  // namespace

int64_t count_binary_records(const std::vector<fs::path>& files, int64_t limit) {
  int64_t total = 0;
  for (const auto& file : files) {
    if (limit > 0 && total >= limit) break;
    total += checked_size(file) / kBinaryRecordBytes;
  }
  return limit > 0 ? std::min(limit, total) : total;
}

Split read_binary_batches(const std::vector<fs::path>& files, int64_t limit) {
  // Validate every file up front so a bad last batch is reported before minutes of work.
  std::vector<std::vector<char>> contents;
  int64_t total = 0;
  for (const auto& file : files) {
    if (limit > 0 && total >= limit) break;
    contents.push_back(read_whole_file(file));
    total += static_cast<int64_t>(contents.back().size()) / kBinaryRecordBytes;
  }
  const int64_t count = limit > 0 ? std::min(limit, total) : total;

  auto images = torch::empty({count, kChannels, kImageSide, kImageSide}, torch::kUInt8);
  auto labels = torch::empty({count}, torch::kInt64);
  auto* pixels = images.data_ptr<uint8_t>();
  auto* label_out = labels.data_ptr<int64_t>();
  constexpr int64_t kPixelBytes = kBinaryRecordBytes - 1;

  int64_t n = 0;
  for (size_t f = 0; f < contents.size() && n < count; ++f) {
    const auto& buffer = contents[f];
    const int64_t records = static_cast<int64_t>(buffer.size()) / kBinaryRecordBytes;
    for (int64_t r = 0; r < records && n < count; ++r, ++n) {
      const char* record = buffer.data() + r * kBinaryRecordBytes;
      const auto label = static_cast<uint8_t>(record[0]);
      if (label >= kNumClasses) {
        throw DataError(files[f].string() + ": record " + std::to_string(r) + " has label " +
                        std::to_string(label) + ", expected 0..9");
      }
      label_out[n] = label;
      // The record's pixel layout (R plane, G plane, B plane) is already CHW.
      std::memcpy(pixels + n * kPixelBytes, record + 1, kPixelBytes);
    }
  }
  return {images, labels};
}

std::string binary_records(const Split& split, int64_t begin, int64_t end) {
  constexpr int64_t kPixelBytes = kBinaryRecordBytes - 1;
  const auto images = split.images.contiguous();
  const auto labels = split.labels.contiguous();
  const auto* pixels = images.data_ptr<uint8_t>();
  const auto* label_in = labels.data_ptr<int64_t>();
  std::string bytes(static_cast<size_t>((end - begin) * kBinaryRecordBytes), '\0');
  for (int64_t n = begin; n < end; ++n) {
    if (label_in[n] < 0 || label_in[n] >= kNumClasses) {
      throw DataError("image " + std::to_string(n) + " has label " + std::to_string(label_in[n]) +
                      "; the binary format holds labels 0..9");
    }
    char* record = bytes.data() + (n - begin) * kBinaryRecordBytes;
    record[0] = static_cast<char>(label_in[n]);
    std::memcpy(record + 1, pixels + n * kPixelBytes, kPixelBytes);
  }
  return bytes;
}

}  // namespace data
