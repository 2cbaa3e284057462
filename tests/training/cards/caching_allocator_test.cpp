// The caching allocator model on hand-built streams whose outcome follows from
// c10/cuda/CUDACachingAllocator.cpp's rules (the function each case follows is named).
#include "training/cards/caching_allocator.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "training/cards/alloc_conf.h"
#include "training/platform/errors.h"

namespace training {
namespace {

AllocatorOptions options(int64_t limit, int64_t max_split_size = AllocatorOptions{}.max_split_size,
                         bool expandable = false) {
  AllocatorOptions o;
  o.limit = limit;
  o.max_split_size = max_split_size;
  o.expandable_segments = expandable;
  return o;
}

TEST(CachingAllocatorModel, RoundsEveryRequestUpTo512Bytes) {  // round_size
  CachingAllocatorModel allocator;
  ASSERT_TRUE(allocator.allocate(1, 1));
  ASSERT_TRUE(allocator.allocate(2, 513));
  ASSERT_TRUE(allocator.allocate(3, 1024));
  EXPECT_EQ(allocator.block_size(1), 512);
  EXPECT_EQ(allocator.block_size(2), 1024);
  EXPECT_EQ(allocator.block_size(3), 1024);
  EXPECT_EQ(allocator.stats().allocated, 2560);
  EXPECT_EQ(allocator.stats().reserved, 2 * kMiB);  // one small segment holds all three
  EXPECT_EQ(allocator.stats().segments, 1);
}

TEST(CachingAllocatorModel, ChoosesThePoolAndTheSegmentSizeByTheRequest) {
  // get_pool and get_allocation_size: <= 1 MiB small (2 MiB segments), < 10 MiB large in 20 MiB
  // segments, larger ones a segment of their own rounded up to 2 MiB. Each in an empty cache.
  struct Case {
    int64_t request, block, reserved;
  };
  for (const Case& c : {Case{kMiB, kMiB, 2 * kMiB}, Case{kMiB + 1, kMiB + 512, 20 * kMiB},
                        Case{10 * kMiB, 10 * kMiB, 10 * kMiB},
                        // The remainder, 1 MiB - 512 B, is not over 1 MiB: not split, so the whole
                        // 12 MiB block counts as allocated (should_split).
                        Case{11 * kMiB + 1, 12 * kMiB, 12 * kMiB}}) {
    CachingAllocatorModel allocator;
    ASSERT_TRUE(allocator.allocate(1, c.request));
    EXPECT_EQ(allocator.block_size(1), c.block) << c.request;
    EXPECT_EQ(allocator.stats().allocated, c.block) << c.request;
    EXPECT_EQ(allocator.stats().reserved, c.reserved) << c.request;
  }
  // A large request is served from a cached large block before a new segment is made.
  CachingAllocatorModel allocator;
  ASSERT_TRUE(allocator.allocate(1, kMiB + 1));
  ASSERT_TRUE(allocator.allocate(2, 11 * kMiB));
  EXPECT_EQ(allocator.stats().reserved, 20 * kMiB);
  EXPECT_EQ(allocator.stats().segments, 1);
}

TEST(CachingAllocatorModel, ReusesAFreedBlockWithoutReservingMore) {  // get_free_block
  CachingAllocatorModel allocator;
  ASSERT_TRUE(allocator.allocate(1, 4 * kMiB));
  const int64_t address = allocator.block_address(1);
  allocator.free(1);
  EXPECT_EQ(allocator.stats().allocated, 0);
  EXPECT_EQ(allocator.stats().reserved, 20 * kMiB);  // nothing is returned to the device
  ASSERT_TRUE(allocator.allocate(2, 4 * kMiB));
  EXPECT_EQ(allocator.block_address(2), address);
  EXPECT_EQ(allocator.stats().reserved, 20 * kMiB);
}

TEST(CachingAllocatorModel, TakesTheSmallestFreeBlockThatFits) {  // best fit
  CachingAllocatorModel allocator;
  ASSERT_TRUE(allocator.allocate(1, 30 * kMiB));
  ASSERT_TRUE(allocator.allocate(2, 12 * kMiB));
  const int64_t twelve = allocator.block_address(2);
  allocator.free(1);
  allocator.free(2);
  ASSERT_TRUE(allocator.allocate(3, 11 * kMiB));
  EXPECT_EQ(allocator.block_address(3), twelve);
  EXPECT_EQ(allocator.stats().reserved, 42 * kMiB);
}

TEST(CachingAllocatorModel, SplitsAndMergesBlocksOfOneSegment) {  // should_split, free_block
  CachingAllocatorModel allocator;
  for (int64_t id = 1; id <= 3; ++id) ASSERT_TRUE(allocator.allocate(id, 5 * kMiB));
  EXPECT_EQ(allocator.stats().segments, 1);  // three 5 MiB blocks split off one 20 MiB segment
  const int64_t start = allocator.block_address(1);
  EXPECT_EQ(allocator.block_address(2), start + 5 * kMiB);
  allocator.free(2);
  allocator.free(1);  // merges with 2's block: 10 MiB free at the start
  ASSERT_TRUE(allocator.allocate(4, 9 * kMiB));
  EXPECT_EQ(allocator.block_address(4), start);
  EXPECT_EQ(allocator.stats().reserved, 20 * kMiB);
}

TEST(CachingAllocatorModel, AFragmentedCacheRunsOutWithFreeBytesLeft) {
  // Two 20 MiB segments of 5 MiB blocks, every other one freed: 20 MiB free, no 10 MiB piece; a
  // new segment would pass the limit and no whole segment is free to release.
  CachingAllocatorModel allocator(options(40 * kMiB));
  for (int64_t id = 1; id <= 8; ++id) ASSERT_TRUE(allocator.allocate(id, 5 * kMiB));
  EXPECT_EQ(allocator.stats().reserved, 40 * kMiB);
  for (int64_t id : {1, 3, 5, 7}) allocator.free(id);
  EXPECT_EQ(allocator.stats().allocated, 20 * kMiB);
  EXPECT_FALSE(allocator.allocate(9, 10 * kMiB));
  EXPECT_EQ(allocator.stats().retries, 1);
  EXPECT_EQ(allocator.stats().reserved, 40 * kMiB);
  // Freeing a neighbour makes a 10 MiB block, which the request then takes.
  allocator.free(2);
  EXPECT_TRUE(allocator.allocate(9, 10 * kMiB));
}

TEST(CachingAllocatorModel, ReleasesWholeCachedSegmentsBeforeGivingUp) {  // release_cached_blocks
  CachingAllocatorModel allocator(options(60 * kMiB));
  for (int64_t id = 1; id <= 3; ++id) ASSERT_TRUE(allocator.allocate(id, 20 * kMiB));
  allocator.free(1);
  allocator.free(3);
  ASSERT_TRUE(allocator.allocate(4, 30 * kMiB));
  EXPECT_EQ(allocator.stats().retries, 1);
  EXPECT_EQ(allocator.stats().reserved, 50 * kMiB);
  EXPECT_EQ(allocator.stats().peak_reserved, 60 * kMiB);
}

TEST(CachingAllocatorModel, MaxSplitSizeKeepsOversizeBlocksWhole) {  // get_free_block's limits
  CachingAllocatorModel plain;
  ASSERT_TRUE(plain.allocate(1, 50 * kMiB));
  plain.free(1);
  ASSERT_TRUE(plain.allocate(2, 20 * kMiB));
  EXPECT_EQ(plain.stats().reserved, 50 * kMiB);  // split off the cached 50 MiB block

  CachingAllocatorModel limited(options(0, 40 * kMiB));
  ASSERT_TRUE(limited.allocate(1, 50 * kMiB));
  limited.free(1);
  ASSERT_TRUE(limited.allocate(2, 20 * kMiB));
  EXPECT_EQ(limited.stats().reserved, 70 * kMiB);  // an oversize block serves no smaller request
  // An oversize request takes a cached block less than 20 MiB larger, whole.
  limited.free(2);
  ASSERT_TRUE(limited.allocate(3, 45 * kMiB));
  EXPECT_EQ(limited.block_size(3), 50 * kMiB);
  EXPECT_EQ(limited.stats().reserved, 70 * kMiB);
}

TEST(CachingAllocatorModel, MaxSplitSizeReleasesOversizeSegmentsFirst) {
  // release_available_cached_blocks: the cached 50 MiB segment goes before the last retry.
  CachingAllocatorModel allocator(options(60 * kMiB, 40 * kMiB));
  ASSERT_TRUE(allocator.allocate(1, 50 * kMiB));
  allocator.free(1);
  ASSERT_TRUE(allocator.allocate(2, 20 * kMiB));
  EXPECT_EQ(allocator.stats().reserved, 20 * kMiB);
  EXPECT_EQ(allocator.stats().retries, 0);
}

TEST(CachingAllocatorModel, ExpandableSegmentsGrowByPages) {
  CachingAllocatorModel allocator(options(0, AllocatorOptions{}.max_split_size, true));
  ASSERT_TRUE(allocator.allocate(1, 25 * kMiB));
  EXPECT_EQ(allocator.stats().reserved, 40 * kMiB);  // two 20 MiB pages
  EXPECT_EQ(allocator.block_size(1), 25 * kMiB);
  ASSERT_TRUE(allocator.allocate(2, 10 * kMiB));  // in the 15 MiB left at the end
  EXPECT_EQ(allocator.stats().reserved, 40 * kMiB);
  EXPECT_EQ(allocator.block_address(2), allocator.block_address(1) + 25 * kMiB);
  ASSERT_TRUE(allocator.allocate(3, 10 * kMiB));  // 5 MiB left: one more page joins it
  EXPECT_EQ(allocator.stats().reserved, 60 * kMiB);
  EXPECT_EQ(allocator.block_address(3), allocator.block_address(2) + 10 * kMiB);
  EXPECT_EQ(allocator.stats().segments, 1);
}

TEST(CachingAllocatorModel, ExpandableSegmentsGiveTheirFreeEndToARequestGetFreeBlockRefused) {
  // try_allocate_expandable_block: get_free_block refuses the free 160 MiB at the segment's end to
  // a 50 MiB request (oversize under max_split_size_mb), but find_expandable_block takes the free
  // block before the unmapped space when it holds the request: nothing is mapped or unmapped.
  CachingAllocatorModel allocator(options(0, 100 * kMiB, true));
  ASSERT_TRUE(allocator.allocate(1, 150 * kMiB));
  const int64_t start = allocator.block_address(1);
  EXPECT_EQ(allocator.stats().reserved, 160 * kMiB);
  allocator.free(1);
  ASSERT_TRUE(allocator.allocate(2, 50 * kMiB));
  EXPECT_EQ(allocator.stats().reserved, 160 * kMiB);
  EXPECT_EQ(allocator.block_address(2), start);
  EXPECT_EQ(allocator.block_size(2), 50 * kMiB);
  ASSERT_TRUE(allocator.allocate(3, 130 * kMiB));  // 110 MiB free at the end: one page more
  EXPECT_EQ(allocator.stats().reserved, 180 * kMiB);
  EXPECT_EQ(allocator.block_address(3), start + 50 * kMiB);
}

TEST(CachingAllocatorModel, ExpandableSegmentsUnmapFreePagesAnywhereAndMapTheHolesAgain) {
  // release_cached_blocks -> unmap_block: under the limit, the free 40 MiB between two allocated
  // blocks loses its memory; the segment then grows at its end, and a later request small enough
  // for the hole maps pages there (find_expandable_block takes the lowest address that holds it).
  CachingAllocatorModel allocator(options(160 * kMiB, AllocatorOptions{}.max_split_size, true));
  for (int64_t id = 1; id <= 3; ++id) ASSERT_TRUE(allocator.allocate(id, 40 * kMiB));
  const int64_t start = allocator.block_address(1);
  EXPECT_EQ(allocator.stats().reserved, 120 * kMiB);
  allocator.free(2);
  ASSERT_TRUE(allocator.allocate(4, 60 * kMiB));  // 180 MiB would pass the limit: a retry first
  EXPECT_EQ(allocator.stats().retries, 1);
  EXPECT_EQ(allocator.block_address(4), start + 120 * kMiB);
  EXPECT_EQ(allocator.stats().reserved, 140 * kMiB);
  ASSERT_TRUE(allocator.allocate(5, 20 * kMiB));
  EXPECT_EQ(allocator.block_address(5), start + 40 * kMiB);
  EXPECT_EQ(allocator.stats().reserved, 160 * kMiB);
  EXPECT_EQ(allocator.stats().segments, 1);
  // Everything freed: a request over the limit unmaps every page before it fails.
  for (int64_t id : {1, 3, 4, 5}) allocator.free(id);
  EXPECT_FALSE(allocator.allocate(6, 200 * kMiB));
  EXPECT_EQ(allocator.stats().reserved, 0);
}

TEST(CachingAllocatorModel, ExpandableSegmentsAvoidTheGrowingBatchsSlivers) {
  // The pattern of the source's note: tensors of a batch N, then N + 1. Separate segments leave
  // each old one too small; one expandable segment reuses its freed space.
  auto run = [](AllocatorOptions given) {
    CachingAllocatorModel allocator(given);
    for (int64_t id = 0; id < 4; ++id) allocator.allocate(id, 40 * kMiB);
    for (int64_t id = 0; id < 4; ++id) allocator.free(id);
    for (int64_t id = 10; id < 14; ++id) allocator.allocate(id, 41 * kMiB);
    return allocator.stats().peak_reserved;
  };
  EXPECT_EQ(run({}), 160 * kMiB + 4 * 42 * kMiB);
  EXPECT_EQ(run(options(0, AllocatorOptions{}.max_split_size, true)), 180 * kMiB);
}

// The model's books on random streams, for every combination of its options, with and without a
// limit: the blocks handed out never overlap and each holds its request, "allocated" is their sum,
// "reserved" covers it and stays under the limit, and a stream freed to the end allocates nothing.
TEST(CachingAllocatorModel, KeepsItsBooksOnRandomStreams) {
  std::mt19937_64 random(38);
  auto request = [&] {  // small, medium and large requests, as a training step makes
    const int64_t tops[] = {kMiB, 10 * kMiB, 200 * kMiB};
    return std::uniform_int_distribution<int64_t>(1, tops[random() % 3])(random);
  };
  for (const int64_t limit : {int64_t{0}, 600 * kMiB}) {
    for (const int64_t max_split : {AllocatorOptions{}.max_split_size, 40 * kMiB}) {
      for (const bool expandable : {false, true}) {
        SCOPED_TRACE(testing::Message() << "limit " << limit << ", max_split " << max_split
                                        << ", expandable " << expandable);
        CachingAllocatorModel allocator(options(limit, max_split, expandable));
        std::map<int64_t, int64_t> live;  // id -> bytes asked
        for (int64_t id = 0; id < 3000; ++id) {
          if (!live.empty() && random() % 5 < 2) {
            auto it = std::next(live.begin(), static_cast<long>(random() % live.size()));
            allocator.free(it->first);
            live.erase(it);
          } else {
            const int64_t bytes = request();
            if (allocator.allocate(id, bytes)) live[id] = bytes;
          }
          std::map<int64_t, int64_t> spans;  // address -> end
          int64_t sum = 0;
          for (const auto& [held, bytes] : live) {
            const int64_t size = allocator.block_size(held);
            ASSERT_GE(size, bytes) << "id " << held;
            sum += size;
            spans[allocator.block_address(held)] = allocator.block_address(held) + size;
          }
          for (auto it = spans.begin(); it != spans.end() && std::next(it) != spans.end(); ++it) {
            ASSERT_LE(it->second, std::next(it)->first) << "blocks overlap after id " << id;
          }
          const auto& stats = allocator.stats();
          ASSERT_EQ(stats.allocated, sum) << "after id " << id;
          ASSERT_GE(stats.reserved, stats.allocated) << "after id " << id;
          ASSERT_GE(stats.peak_reserved, stats.reserved);
          if (limit > 0) {
            ASSERT_LE(stats.reserved, limit) << "after id " << id;
          }
        }
        for (const auto& [held, bytes] : live) allocator.free(held);
        EXPECT_EQ(allocator.stats().allocated, 0);
      }
    }
  }
}

// An expandable segment spans 1.125 x the card's memory in whole pages of its pool (LibTorch's
// cuMemAddressReserve of numSegments(totalGlobalMem + totalGlobalMem / 8) pages): requests beyond
// it fail without a limit too, and a hole freed inside it is mapped again.
TEST(CachingAllocatorModel, AnExpandableSegmentSpansAnEighthMoreThanTheCard) {
  AllocatorOptions options;
  options.expandable_segments = true;
  options.device_memory = 100 * kMiB;  // 112.5 MiB: 6 of the large pool's 20 MiB pages, 120 MiB
  CachingAllocatorModel allocator(options);
  ASSERT_TRUE(allocator.allocate(1, 40 * kMiB));
  ASSERT_TRUE(allocator.allocate(2, 40 * kMiB));
  ASSERT_TRUE(allocator.allocate(3, 40 * kMiB));
  EXPECT_FALSE(allocator.allocate(4, 20 * kMiB));
  allocator.free(1);
  EXPECT_TRUE(allocator.allocate(5, 40 * kMiB));
  options.device_memory = 0;  // no card: room for any card's
  CachingAllocatorModel unbounded(options);
  for (int64_t id = 1; id <= 4; ++id) EXPECT_TRUE(unbounded.allocate(id, 40 * kMiB));
}

TEST(CachingAllocatorModel, ReadsPytorchCudaAllocConf) {
  EXPECT_EQ(parse_alloc_conf(""), AllocatorOptions{});
  const auto read = parse_alloc_conf("max_split_size_mb:128, expandable_segments:True");
  EXPECT_EQ(read.max_split_size, 128 * kMiB);
  EXPECT_TRUE(read.expandable_segments);
  EXPECT_EQ(alloc_conf_text(read), "max_split_size_mb:128,expandable_segments:True");
  EXPECT_THROW(parse_alloc_conf("max_split_size_mb:10"), UserError);
  // As LibTorch 2.11 reads it (c10/core/AllocatorConfig.h: blanks dropped anywhere, the value by
  // std::stoull, 20 MiB the least): 20, leading zeros and a thousand TiB are taken.
  EXPECT_EQ(parse_alloc_conf("max_split_size_mb:20").max_split_size, 20 * kMiB);
  EXPECT_EQ(parse_alloc_conf("max_split_size_mb:0000000021").max_split_size, 21 * kMiB);
  EXPECT_EQ(parse_alloc_conf("max_split_size_mb:1000000000").max_split_size, 1000000000 * kMiB);
  EXPECT_EQ(parse_alloc_conf("max_split_size_mb:99999999999999").max_split_size,
            std::numeric_limits<int64_t>::max());  // no block is that large: no limit
  EXPECT_TRUE(parse_alloc_conf("expand able_segments : True").expandable_segments);
  std::string umlauts = "max_split_size_mb:x";  // a long value is cut before a character
  for (int i = 0; i < 300; ++i) umlauts += "\xc3\xbc";
  try {
    parse_alloc_conf(umlauts);
    ADD_FAILURE() << "accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(umlauts.substr(18, 199) + "...' (601 bytes)"),
              std::string::npos)
        << e.what();
  }
  for (const char* bad : {"max_split_size_mb:19", "max_split_size_mb:99999999999999999999999",
                          "max_split_size_mb:-5", "max_split_size_mb:x"}) {
    try {
      parse_alloc_conf(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("expected a whole number of MiB from 20 to "
                                           "18446744073709551615"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(parse_alloc_conf("expandable_segments:yes"), UserError);
  try {
    parse_alloc_conf("roundup_power2_divisions:4");
    FAIL() << "an option the model does not follow was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("roundup_power2_divisions: not modelled"),
              std::string::npos)
        << e.what();
  }
}

// LibTorch 2.11 reads PYTORCH_CUDA_ALLOC_CONF when it is set (empty too) and PYTORCH_ALLOC_CONF
// otherwise (measured: c10::CachingAllocator::AcceleratorAllocatorConfig with both set); the
// prediction reads the same one and names it in a refusal.
TEST(CachingAllocatorModel, ReadsTheVariableLibTorchReads) {
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  ASSERT_EQ(setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:200", 1), 0);
  EXPECT_EQ(alloc_conf_from_environment().max_split_size, 200 * kMiB);
  ASSERT_EQ(setenv("PYTORCH_CUDA_ALLOC_CONF", "", 1), 0);
  EXPECT_EQ(alloc_conf_from_environment(), AllocatorOptions{});
  ASSERT_EQ(setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:100", 1), 0);
  EXPECT_EQ(alloc_conf_from_environment().max_split_size, 100 * kMiB);
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  ASSERT_EQ(setenv("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.6", 1), 0);
  try {
    alloc_conf_from_environment();
    ADD_FAILURE() << "an option the model does not follow was accepted from PYTORCH_ALLOC_CONF";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("PYTORCH_ALLOC_CONF: garbage_collection_threshold", 0),
              0u)
        << e.what();
  }
  unsetenv("PYTORCH_ALLOC_CONF");
}

}  // namespace
}  // namespace training
