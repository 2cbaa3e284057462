// A model of LibTorch 2.11's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator), for predicting a card's allocated and reserved bytes from an allocation
// stream recorded on the CPU (card_prediction.h). One device, one stream, no CUDA graphs. The
// rules, each named after the function of the source it follows:
//   round_size            rounded up to a multiple of 512 B (kMinBlockSize), at least 512 B
//   get_pool              <= 1 MiB (kSmallSize): the small pool, else the large pool
//   get_allocation_size   a new segment: 2 MiB (kSmallBuffer) for a small request, 20 MiB
//                         (kLargeBuffer) for one under 10 MiB (kMinLargeAlloc), else the request
//                         rounded up to 2 MiB (kRoundLarge)
//   get_free_block        best fit: the smallest free block of the pool at least as large, the
//                         lowest address among equals; with max_split_size_mb, a request below it
//                         never takes an oversize block, and one at or above it only a block less
//                         than 20 MiB larger
//   should_split          small pool: a remainder of 512 B or more is split off; large pool: a
//                         remainder over 1 MiB, and only for requests below max_split_size
//   free_block            a freed block merges with its free neighbours of the same segment
//   alloc_block           a new segment, refused when it would take the reserved bytes over the
//                         limit (the card's memory less what lies outside the allocator, or
//                         memory.limit)
//   release_available_cached_blocks   (max_split_size_mb set) frees oversize cached segments
//   release_cached_blocks the last retry: every free segment that is not split is returned
// "allocated" counts the sizes of the blocks handed out (rounded, and whole when not split), as
// torch.cuda.memory_allocated does; "reserved" the segments held, as memory_reserved does.
// expandable_segments:True: one segment per pool, address space whose pages (2 MiB small, 20 MiB
// large) get memory as needed, every remainder of 512 B or more split off:
//   get_free_block        a free block before address space without memory counts as the size it
//                         can grow to
//   try_allocate_expandable_block   the first address space without memory (by address), with
//                         the free block before it, that holds the request; map_block gives its
//                         whole pages memory
//   release_cached_blocks unmap_block takes the memory from the whole pages inside every free
//                         block; the segment goes when none is left
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <unordered_map>
#include <vector>

#include "training/platform/memory.h"

namespace training {

struct AllocatorOptions {
  int64_t max_split_size = std::numeric_limits<int64_t>::max();  // max_split_size_mb, in bytes
  bool expandable_segments = false;
  int64_t limit = 0;  // the most bytes of segments it may hold; 0 = no limit
  // The card's memory: an expandable segment spans 1.125 times it (0: a span larger than any card)
  int64_t device_memory = 0;

  bool operator==(const AllocatorOptions& other) const {
    return max_split_size == other.max_split_size &&
           expandable_segments == other.expandable_segments && limit == other.limit &&
           device_memory == other.device_memory;
  }
};

struct AllocatorStats {
  int64_t allocated = 0, peak_allocated = 0;
  int64_t reserved = 0, peak_reserved = 0;
  int64_t segments = 0;
  int64_t retries = 0;  // allocations that freed cached segments first
};

// What the allocator does, in the actions of LibTorch's allocator history (TraceEntry): a segment
// reserved (cudaMalloc) or returned (cudaFree), a page range of an expandable segment given memory
// or its memory taken, a block handed out for an allocation or given back.
struct AllocatorEvent {
  enum class Action { SegmentAlloc, SegmentFree, SegmentMap, SegmentUnmap, Alloc, Free };
  Action action = Action::Alloc;
  int64_t address = 0;
  int64_t size = 0;  // a segment's or page range's bytes; an allocation's bytes as requested
  int64_t id = -1;   // Alloc, Free: the allocation
};

// A block of a segment (the allocator's BlockInfo): allocated, or free.
struct BlockState {
  int64_t address = 0, size = 0;
  bool allocated = false;
  int64_t requested = 0;  // allocated: the bytes asked for, and the allocation
  int64_t id = -1;
};

// A segment as the allocator's snapshot() lists it (SegmentInfo); of an expandable segment, each
// range of address space with memory.
struct SegmentState {
  int64_t address = 0, size = 0;
  bool small = false;  // of the small pool (<= 1 MiB requests)
  bool expandable = false;
  std::vector<BlockState> blocks;  // by address; their sizes sum to the segment's
};

class CachingAllocatorModel {
 public:
  explicit CachingAllocatorModel(AllocatorOptions options = {});
  ~CachingAllocatorModel();
  CachingAllocatorModel(const CachingAllocatorModel&) = delete;
  CachingAllocatorModel& operator=(const CachingAllocatorModel&) = delete;

  // Allocation `id` of `bytes` (as requested). False: out of memory (nothing changed), as the
  // allocator throws after its retries. An id is allocated at most once at a time.
  bool allocate(int64_t id, int64_t bytes);
  void free(int64_t id);  // an id not allocated is ignored

  const AllocatorStats& stats() const { return stats_; }
  // The segments held now, by address, with their blocks.
  std::vector<SegmentState> segments() const;
  // Each event from now on, as it happens (nullptr: none): a segment's or page range's release
  // before it, while segments() still lists it, the others after.
  void set_listener(std::function<void(const AllocatorEvent&)> listener);
  // The block handed out for `id`: its size (0 when none) and address, for tests.
  int64_t block_size(int64_t id) const;
  int64_t block_address(int64_t id) const;

 private:
  struct Block;
  struct Pool;
  struct AllocParams;
  bool get_free_block(AllocParams& p);
  bool alloc_block(AllocParams& p, bool is_retry);
  bool release_available_cached_blocks(const AllocParams& p);
  bool release_cached_blocks();
  Block* new_segment(Pool& pool, int64_t segment_size);
  Block* try_allocate_expandable_block(Pool& pool, int64_t size);
  bool map_block(Pool& pool, Block* space, int64_t bytes);
  void unmap_block(Pool& pool, Block* block);
  void merge_free_neighbours(Pool& pool, Block* block);
  void release_block(Pool& pool, Block* block);
  Pool& pool_of(Block* block);
  void tell(AllocatorEvent::Action action, int64_t address, int64_t size, int64_t id = -1) const;
  Block* split(Pool& pool, Block* block, int64_t size);
  bool should_split(const Pool& pool, const Block* block, int64_t size) const;

  AllocatorOptions options_;
  std::unique_ptr<Pool> small_, large_;
  std::unordered_map<int64_t, Block*> active_;
  int64_t next_address_ = 0;
  AllocatorStats stats_;
  std::function<void(const AllocatorEvent&)> listener_;
};

}  // namespace training
