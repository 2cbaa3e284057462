// Reader for the official CIFAR-10 binary release (cifar-10-binary.tar.gz):
// data_batch_1..5.bin (train) and test_batch.bin (test), each a run of 3073-byte records:
// 1 label byte, then 1024 red, 1024 green and 1024 blue bytes (row-major 32x32 planes).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "data/split.h"

namespace data {

inline constexpr int64_t kBinaryRecordBytes = 1 + kChannels * kImageSide * kImageSide;

// The batch files of one split inside `dir`, in the official order.
std::vector<std::filesystem::path> binary_batch_files(const std::filesystem::path& dir, bool train);

// Reads the records of `files` in order, stopping after `limit` records (0 = all).
// Throws DataError naming the file (and record) for a missing file, a size that is not a whole
// number of records, or a label above 9.
Split read_binary_batches(const std::vector<std::filesystem::path>& files, int64_t limit = 0);

// How many records read_binary_batches(files, limit) would read, from the files' sizes (nothing is
// read); the same DataError for a missing, empty or truncated file.
int64_t count_binary_records(const std::vector<std::filesystem::path>& files, int64_t limit = 0);

// Records [begin, end) of `split` in the official format, the bytes read_binary_batches reads
// back as the same images and labels. Throws DataError for a label above 9 (the format's byte
// holds one, the reader refuses it).
std::string binary_records(const Split& split, int64_t begin, int64_t end);

}  // namespace data
