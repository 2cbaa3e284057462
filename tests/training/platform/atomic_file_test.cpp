#include "training/platform/atomic_file.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"

namespace {

namespace fs = std::filesystem;

TEST(AtomicFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  test_support::TempDir dir;
  training::write_file_atomically(dir / "f.txt", "old");
  EXPECT_THROW(training::replace_file_atomically(dir / "f.txt",
                                                 [](const fs::path& temporary) {
                                                   std::ofstream(temporary) << "half";
                                                   throw std::runtime_error("disk full");
                                                 }),
               std::runtime_error);
  EXPECT_EQ(test_support::read_text(dir / "f.txt"), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

}  // namespace
