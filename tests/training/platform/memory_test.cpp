#include "training/platform/memory.h"

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "training/platform/device.h"
#include "training/platform/errors.h"

namespace {

using training::TrackingCpuAllocator;

class TrackingAllocator : public ::testing::Test {
 protected:
  void SetUp() override { allocator().set_limit(0); }
  void TearDown() override { allocator().set_limit(0); }
  static TrackingCpuAllocator& allocator() { return TrackingCpuAllocator::instance(); }
};

TEST_F(TrackingAllocator, CountsBytesHeldByCpuTensors) {
  const int64_t before = allocator().stats().allocated;
  {
    auto t = torch::empty({1000, 250}, torch::kFloat32);  // 1,000,000 bytes
    EXPECT_EQ(allocator().stats().allocated - before, 1000000);
    EXPECT_EQ(c10::GetCPUAllocator(), &allocator());
  }
  EXPECT_EQ(allocator().stats().allocated, before);
}

// The decoded dataset is host data: not device memory on CUDA, so not counted (nor limited) on the
// CPU either; freeing it later does not disturb the count.
TEST_F(TrackingAllocator, HostDataIsNeitherCountedNorLimited) {
  allocator().reset_peak();
  const int64_t before = allocator().stats().allocated;
  allocator().set_limit(before + (1 << 20));
  torch::Tensor dataset;
  {
    TrackingCpuAllocator::HostData host_data;
    dataset = torch::zeros({8 << 20}, torch::kUInt8);  // 8 MiB, beyond the limit
  }
  EXPECT_EQ(allocator().stats().allocated, before);
  EXPECT_EQ(allocator().stats().peak_allocated, before);
  EXPECT_THROW(torch::empty({2 << 20}, torch::kUInt8), c10::OutOfMemoryError);  // tracked again
  dataset = torch::Tensor();
  EXPECT_EQ(allocator().stats().allocated, before);
}

TEST_F(TrackingAllocator, PeakStaysUntilReset) {
  allocator().reset_peak();
  const int64_t base = allocator().stats().allocated;
  { auto t = torch::empty({4 << 20}, torch::kUInt8); }
  EXPECT_GE(allocator().stats().peak_allocated, base + (4 << 20));
  allocator().reset_peak();
  EXPECT_EQ(allocator().stats().peak_allocated, allocator().stats().allocated);
}

TEST_F(TrackingAllocator, LimitFailsLikeAnOutOfMemoryAndRecovers) {
  const int64_t held = allocator().stats().allocated;
  allocator().set_limit(held + (8 << 20));
  auto fits = torch::empty({4 << 20}, torch::kUInt8);
  try {
    auto too_much = torch::empty({8 << 20}, torch::kUInt8);
    FAIL() << "no out-of-memory error";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("limit 8.00 MiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(allocator().stats().allocated, held + (4 << 20));  // the refused bytes are not counted
  allocator().set_limit(0);
  EXPECT_NO_THROW(torch::empty({16 << 20}, torch::kUInt8));
}

TEST_F(TrackingAllocator, DeviceSeamReportsAndLimitsTheCpu) {
  EXPECT_EQ(training::memory_stats(torch::kCPU).allocated, allocator().stats().allocated);
  training::set_memory_limit(torch::kCPU, 123 << 20);
  EXPECT_EQ(allocator().limit(), 123 << 20);
  EXPECT_GT(training::total_memory(torch::kCPU), int64_t{1} << 30);
  EXPECT_THROW(training::set_memory_limit(torch::kCPU, training::total_memory(torch::kCPU) * 2),
               training::UserError);
}

TEST(ByteSize, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(training::parse_byte_size("12GiB"), int64_t{12} << 30);
  EXPECT_EQ(training::parse_byte_size("512 MiB"), int64_t{512} << 20);
  EXPECT_EQ(training::parse_byte_size("1.5gb"), 1500000000);
  EXPECT_EQ(training::parse_byte_size("64KiB"), 65536);
  EXPECT_EQ(training::parse_byte_size("1000B"), 1000);
  for (const char* bad : {"", "GiB", "1000", "12 apples", "-1GiB", "1e30TiB"}) {
    EXPECT_THROW(training::parse_byte_size(bad), std::invalid_argument) << bad;
  }
}

// One reader for every size (config keys, --memory-limit, train plan's --memory and --overhead,
// --predict-for): the documented forms only (round 3: a floating-point reader took hexadecimal,
// exponents, inf, and rounded "1.5" bytes without a unit).
TEST(ByteSize, OnlyTheDocumentedFormsAreRead) {
  EXPECT_EQ(training::parse_byte_size("0.5KiB"), 512);
  EXPECT_EQ(training::parse_byte_size("1.25GiB"), int64_t{5} << 28);
  EXPECT_EQ(training::parse_byte_size(" 2 TB "), 2000000000000);
  for (const char* bad : {"0x10", "1e3", "1E3MiB", "inf", "nan", "+5", "1.5", "12 GiB x", "1,5GiB",
                          ".5GiB", "5.GiB", "99999999999TiB"}) {
    EXPECT_THROW(training::parse_byte_size(bad), std::invalid_argument) << bad;
  }
}

// Round 5, an eighteenth pass: '1\rGiB' and '1\tGiB' read as 1GiB. A size is written as the
// program prints one ("23.54 GiB"): at most one space between number and unit, white space
// around it (a YAML block scalar's line break); the refusal quotes it on one line.
TEST(ByteSize, OnlyOneSpaceIsWhiteSpaceInsideASize) {
  EXPECT_EQ(training::parse_byte_size("23 GiB"), int64_t{23} << 30);
  EXPECT_EQ(training::parse_byte_size("  1GiB\t\n"), int64_t{1} << 30);
  EXPECT_EQ(training::size_flag("--memory", "\t24GiB "), int64_t{24} << 30);
  for (const char* bad :
       {"1\tGiB", "1\rGiB", "1\nGiB", "1  GiB", "1\vGiB", "1 . 5GiB", "1\u00a0GiB"}) {
    EXPECT_THROW(training::parse_byte_size(bad), std::invalid_argument) << training::one_line(bad);
  }
  const auto refusal = [](const std::string& text) {
    try {
      training::size_flag("--memory-limit", text);
    } catch (const training::UserError& e) {
      return std::string(e.what());
    }
    return std::string("taken");
  };
  EXPECT_EQ(refusal("1\tGiB"),
            "--memory-limit: expected a size with its unit, like 12GiB, 512MiB or 1.5GB, got "
            "'1\\tGiB'");
  EXPECT_EQ(refusal("1\vGiB\x1b"),
            "--memory-limit: expected a size with its unit, like 12GiB, 512MiB or 1.5GB, got "
            "'1\\x0bGiB\\x1b'");
  EXPECT_EQ(refusal("0\t"), "--memory-limit: expected a size above 0, got '0\\t'");
}

// Round 5, a sixth pass: `--memory-limit 23.54GiB`, a figure the program prints, was refused as
// "not a whole number of bytes". A size with a unit is taken rounded down to whole bytes, so
// that every size format_bytes writes reads back as a size it writes alike.
TEST(ByteSize, ASizeWithAUnitIsRoundedDownToWholeBytes) {
  EXPECT_EQ(training::parse_byte_size("23.54GiB"), int64_t{25275882536});  // 25275882536.96
  EXPECT_EQ(training::parse_byte_size("23.54 GiB"), int64_t{25275882536});
  EXPECT_EQ(training::parse_byte_size("0.3KiB"), 307);
  EXPECT_EQ(training::parse_byte_size("1.5B"), 1);
  EXPECT_EQ(training::parse_byte_size("0.999999999999TiB"), int64_t{1099511627774});
  EXPECT_EQ(training::size_flag("--memory-limit", "23.54GiB"), int64_t{25275882536});
  for (const int64_t bytes : {int64_t{1536}, int64_t{146759483}, (int64_t{1106} << 20) + 12345,
                              int64_t{25275882536}, (int64_t{80} << 30) - 7}) {
    const std::string text = training::format_bytes(bytes);
    const int64_t back = training::size_flag("--memory-limit", text);
    EXPECT_EQ(training::format_bytes(back), text);
  }
  // What rounds down to no byte is a size of 0, refused as 0 is.
  EXPECT_EQ(training::parse_byte_size("0.5B"), 0);
  try {
    training::size_flag("--memory-limit", "0.5B");
    ADD_FAILURE() << "0.5B taken";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()), "--memory-limit: expected a size above 0, got '0.5B'");
  }
}

// A number without a unit says a unit is wanted and offers the forms it may have meant, each one
// the reader takes and a card may have ("1.5" was "not a whole number of bytes", and 1610612736
// then had "no unit"): one message for every flag and key. Issue 51, a fifteenth pass: every size
// takes its unit (`--memory-limit 24` trained under 24 bytes, and --card, --memory, --overhead
// and sweep.predict_for each offered other forms).
TEST(ByteSize, ANumberWithoutItsUnitIsToldTheFormsItMayHaveMeant) {
  auto error = [](const std::string& text) {
    try {
      training::parse_byte_size(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("1.5"), "'1.5' has no unit; did you mean 1.5GiB or 1.5MiB or 1.5B?");
  EXPECT_EQ(error("24"), "'24' has no unit; did you mean 24GiB or 24MiB or 24B?");
  // Only forms at most the largest card (1024TiB) and of at least a byte.
  EXPECT_EQ(error("25769803776"), "'25769803776' has no unit; did you mean 25769803776B?");
  EXPECT_EQ(error("0.5"), "'0.5' has no unit; did you mean 0.5GiB or 0.5MiB?");
  EXPECT_EQ(error("0.0000000001"), "'0.0000000001' has no unit; give one, e.g. 24GiB");
  EXPECT_EQ(training::no_unit_refusal("24", int64_t{771} << 20),  // above what lies beside it
            "'24' has no unit; did you mean 24GiB?");
  EXPECT_EQ(training::no_unit_refusal(" 800 ", 0, int64_t{24} << 30),  // below the card's memory
            "'800' has no unit; did you mean 800MiB or 800B?");
  EXPECT_EQ(training::no_unit_refusal("4090", 0, training::kLargestCard, {"the card RTX4090"}),
            "'4090' has no unit; did you mean 4090GiB or 4090MiB or 4090B or the card RTX4090?");
  for (const char* other : {"0", "00", "0.0", "24GiB", "1e3", "", "x"})
    EXPECT_EQ(training::no_unit_refusal(other), "") << other;
  EXPECT_EQ(training::parse_byte_size("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(training::parse_byte_size("1536MiB"), int64_t{3} << 29);
  EXPECT_EQ(training::parse_byte_size("1610612736B"), int64_t{3} << 29);
  EXPECT_EQ(training::parse_byte_size("0"), 0);  // size_flag: "expected a size above 0"
  EXPECT_EQ(error("1.5B"), "no error");          // a unit: rounded down to whole bytes
  try {
    training::size_flag("--memory-limit", "24");
    ADD_FAILURE() << "24 taken";
  } catch (const training::UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--memory-limit: '24' has no unit; did you mean 24GiB or 24MiB or 24B?");
  }
}

// The reader's limits are said as what they are, not as a bad form: more than 9e18 bytes, more
// than 12 decimal places (trailing zeros do not count; round 4 got "expected a size like 12GiB").
TEST(ByteSize, ItsLimitsAreSaidAsLimits) {
  EXPECT_EQ(training::parse_byte_size("1.5000000000000000GiB"), int64_t{3} << 29);
  EXPECT_EQ(training::parse_byte_size("0000000000000000000001KiB"), 1024);
  auto error = [](const char* text) {
    try {
      training::parse_byte_size(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("10000000000000000000B"),
            "'10000000000000000000B' is more than 9e18 bytes, the largest size taken");
  EXPECT_EQ(error("9000000TiB"), "'9000000TiB' is more than 9e18 bytes, the largest size taken");
  EXPECT_EQ(error("8796093022208TiB"),
            "'8796093022208TiB' is more than 9e18 bytes, the largest size taken");
  EXPECT_EQ(error("1.0000000000001GiB"), "'1.0000000000001GiB' has more than 12 decimal places");
  // 19 digits up to 9e18 are a size; a text longer than any size is refused before the regex
  // (30000 digits crashed libstdc++'s recursive matcher).
  EXPECT_EQ(training::parse_byte_size("9000000000000000000B"), int64_t{9000000000000000000});
  EXPECT_EQ(error("9000000000000000001B"),
            "'9000000000000000001B' is more than 9e18 bytes, the largest size taken");
  // A number without its unit is told so before its other faults (fifteenth pass: "has more than
  // 12 decimal places" where --card said "has no unit").
  EXPECT_EQ(error("0.0000000000001"), "'0.0000000000001' has no unit; give one, e.g. 24GiB");
  EXPECT_EQ(error(std::string(30000, '1').c_str()),
            "'111111111111111111111111...' is 30000 characters long, more than a size takes (64)");
}

// A size flag is read once, above 0, its refusals naming the flag.
TEST(ByteSize, ASizeFlagIsAboveZeroAndNamesItsFlag) {
  EXPECT_EQ(training::size_flag("--memory", "12GiB"), int64_t{12} << 30);
  EXPECT_EQ(training::size_flag("--overhead", "1.5KiB"), 1536);
  for (const std::string bad : {"12XB", "0", "-1GiB", "0.5B"}) {
    try {
      training::size_flag("--memory", bad);
      ADD_FAILURE() << bad;
    } catch (const training::UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--memory: ", 0), 0u) << e.what();
    }
  }
}

TEST(ByteSize, FormatsWithTheLargestFittingUnit) {
  EXPECT_EQ(training::format_bytes(12), "12 B");
  EXPECT_EQ(training::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(training::format_bytes(int64_t{12} << 30), "12.00 GiB");
}

// A size advised to the user is one the flags read back, never below what is needed.
// The two sides of a comparison differed but read the same ("its predicted peak 139.96 MiB is
// above this run's budget 139.96 MiB"): they are written with the decimals that tell them apart.
TEST(ByteSize, TheTwoSidesOfAComparisonDifferWhereTheyDiffer) {
  const int64_t budget = 146759483;  // 139.96 MiB to two decimals
  for (const int64_t other : {budget + 1, budget + 3000, budget + 100000, budget - 1}) {
    const auto [a, b] = training::format_bytes_apart(other, budget);
    EXPECT_NE(a, b) << other;
  }
  EXPECT_EQ(training::format_bytes_apart(budget + 3000, budget),
            (std::pair<std::string, std::string>{"139.964 MiB", "139.961 MiB"}));
  const int64_t gib = int64_t{1} << 30;  // a byte apart is below six decimals of a GiB
  EXPECT_EQ(training::format_bytes_apart(gib + 1, gib),
            (std::pair<std::string, std::string>{"1073741825 B", "1073741824 B"}));
  EXPECT_EQ(training::format_bytes_apart(budget, budget).first, "139.96 MiB");
  // A 1.08 GiB card against what a step takes on it, 1 MiB less (round 5, a sixth pass).
  EXPECT_EQ(training::format_bytes_apart(int64_t{1106} << 20, int64_t{1105} << 20),
            (std::pair<std::string, std::string>{"1.080 GiB", "1.079 GiB"}));
  EXPECT_EQ(training::format_bytes_apart(2048, 512),  // apart already: as format_bytes writes them
            (std::pair<std::string, std::string>{"2.00 KiB", "512 B"}));
}

TEST(ByteSize, AnAdvisedSizeReadsBackAtOrAboveWhatItAdvises) {
  for (const int64_t bytes : {int64_t{1}, int64_t{1} << 20, (int64_t{1136} << 20) + 1,
                              int64_t{2} << 30, (int64_t{80} << 30) - 7, int64_t{3} << 40}) {
    const std::string text = training::size_at_least_text(bytes);
    const int64_t back = training::parse_byte_size(text);
    EXPECT_GE(back, bytes) << text;
    EXPECT_LT(back - bytes, int64_t{1} << 20) << text;
  }
  EXPECT_EQ(training::size_at_least_text((int64_t{1136} << 20) + 1), "1137MiB");
  EXPECT_EQ(training::size_at_least_text(int64_t{2} << 30), "2GiB");
}

// Twelfth pass: `train plan --memory 1.5GB` named its card "1500000000", which --memory refuses
// as a size without a unit; and auto's "checkpointing.budget of at least 176MiB", above a
// memory.limit of 175.9MiB, was refused when typed back. Every size written is read back by a
// flag that takes a unit, and an advised size stays within the bound it may not pass.
TEST(ByteSize, WhatIsWrittenIsReadBackByEveryFlagAndStaysWithinItsBound) {
  EXPECT_EQ(training::byte_size_text(1500000000), "1500000000B");
  EXPECT_EQ(training::parse_byte_size("1500000000B"), 1500000000);
  EXPECT_EQ(training::byte_size_text(int64_t{1} << 20), "1MiB");
  const int64_t limit = static_cast<int64_t>(175.9 * (1 << 20));
  const int64_t needed = static_cast<int64_t>(175.71 * (1 << 20));
  EXPECT_EQ(training::size_at_least_text(needed, limit), "179928KiB");  // 176MiB would pass it
  EXPECT_LE(training::parse_byte_size(training::size_at_least_text(needed, limit)), limit);
  EXPECT_EQ(training::size_at_least_text(limit - 3, limit - 1),
            training::byte_size_text(limit - 3));
  EXPECT_EQ(training::size_at_least_text(needed, int64_t{1} << 30), "176MiB");
}

}  // namespace
