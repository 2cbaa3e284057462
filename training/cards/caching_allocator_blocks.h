// The blocks and pools the model of the CUDA caching allocator is made of (caching_allocator.h),
// for its own sources only.
#pragma once

#include <c10/util/Exception.h>

#include <memory>
#include <set>
#include <unordered_map>

#include "training/cards/caching_allocator.h"

namespace training {

struct CachingAllocatorModel::Block {
  int64_t address = 0, size = 0;
  bool allocated = false;
  bool mapped = true;     // expandable_segments: false for address space without memory
  Block* prev = nullptr;  // the neighbours in its segment
  Block* next = nullptr;
  int64_t requested = 0;  // allocated: the bytes asked for, and the allocation's id
  int64_t id = -1;
  bool is_split() const { return prev != nullptr || next != nullptr; }
  // Block::splice: this block goes between [before, this, after]. A segment's blocks tile it:
  // each ends where the next begins, so their sizes sum to the segment's.
  void splice(Block* before, Block* after) {
    TORCH_INTERNAL_ASSERT(!before ||
                          (before->next == after && before->address + before->size == address));
    TORCH_INTERNAL_ASSERT(!after || (after->prev == before && address + size == after->address));
    if (before) before->next = this;
    if (after) after->prev = this;
    prev = before;
    next = after;
  }
  // try_merge_blocks: the neighbours of a block merged away link to each other.
  void unlink() {
    if (prev) prev->next = next;
    if (next) next->prev = prev;
  }
};

struct CachingAllocatorModel::Pool {
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->address < b->address;
    }
  };
  struct ByAddress {
    bool operator()(const Block* a, const Block* b) const { return a->address < b->address; }
  };
  explicit Pool(bool is_small) : small(is_small) {}
  Block* add(int64_t address, int64_t size, bool mapped = true) {
    auto block = std::make_unique<Block>(Block{address, size, /*allocated=*/false, mapped});
    Block* added = block.get();
    owned[added] = std::move(block);
    return added;
  }
  bool small;
  std::set<Block*, BySizeThenAddress> free;  // the free blocks with memory
  std::unordered_map<Block*, std::unique_ptr<Block>> owned;
  int64_t base = -1;  // expandable_segments: where its one segment starts (-1: none yet)
  std::set<Block*, ByAddress> unmapped;  // its blocks without memory
  int64_t page() const;  // the pages of its expandable segment: 2 MiB small, 20 MiB large
};

}  // namespace training
