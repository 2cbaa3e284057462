#include "training/studies/caching_allocator.h"

#include <algorithm>
#include <vector>

namespace training {

namespace {

// The constants of CUDACachingAllocator.cpp.
constexpr int64_t kMinBlockSize = 512;
constexpr int64_t kSmallSize = kMiB;
constexpr int64_t kSmallBuffer = 2 * kMiB;
constexpr int64_t kLargeBuffer = 20 * kMiB;
constexpr int64_t kMinLargeAlloc = 10 * kMiB;
constexpr int64_t kRoundLarge = 2 * kMiB;
// Addresses: each segment starts past the previous one. An expandable pool's segment spans
// 1.125 x the card's memory, as LibTorch reserves it (ExpandableSegment: "enough address space for
// 1 1/8 the total memory on the GPU", totalGlobalMem + totalGlobalMem / 8); without a card, this,
// more than that of the largest card (cards.h's kLargestCard, 1 PiB).
constexpr int64_t kAddressSpan = int64_t{1} << 51;

int64_t round_size(int64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

int64_t allocation_size(int64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

}  // namespace

struct CachingAllocatorModel::Block {
  int64_t address = 0, size = 0;
  bool allocated = false;
  bool mapped = true;     // expandable_segments: false for address space without memory
  Block* prev = nullptr;  // the neighbours in its segment
  Block* next = nullptr;
  bool is_split() const { return prev != nullptr || next != nullptr; }
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
  bool small;
  std::set<Block*, BySizeThenAddress> free;  // the free blocks with memory
  std::unordered_map<Block*, std::unique_ptr<Block>> owned;
  // expandable_segments: the pool's one segment starts at `base` (-1: none yet); its blocks
  // without memory, by address.
  int64_t base = -1;
  std::set<Block*, ByAddress> unmapped;
  int64_t page() const { return small ? kSmallBuffer : kLargeBuffer; }
};

CachingAllocatorModel::CachingAllocatorModel(AllocatorOptions options)
    : options_(options),
      small_(std::make_unique<Pool>(true)),
      large_(std::make_unique<Pool>(false)) {}

CachingAllocatorModel::~CachingAllocatorModel() = default;

void CachingAllocatorModel::reset_peaks() {
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

int64_t CachingAllocatorModel::block_size(int64_t id) const {
  const auto found = active_.find(id);
  return found == active_.end() ? 0 : found->second->size;
}

int64_t CachingAllocatorModel::block_address(int64_t id) const {
  const auto found = active_.find(id);
  return found == active_.end() ? -1 : found->second->address;
}

CachingAllocatorModel::Pool& CachingAllocatorModel::pool_of(Block* block) {
  return small_->owned.count(block) ? *small_ : *large_;
}

void CachingAllocatorModel::insert_free(Pool& pool, Block* block) {
  pool.free.insert(block);
}

void CachingAllocatorModel::erase_free(Pool& pool, Block* block) {
  pool.free.erase(block);
}

bool CachingAllocatorModel::allocate(int64_t id, int64_t bytes) {
  const int64_t size = round_size(bytes);
  Pool& pool = size <= kSmallSize ? *small_ : *large_;
  Block* block = take_free_block(pool, size);
  if (!block && options_.expandable_segments) {
    block = grow_expandable(pool, size);
    if (!block) {
      ++stats_.retries;
      release_free_segments();
      block = grow_expandable(pool, size);
    }
  } else if (!block) {
    const int64_t segment = allocation_size(size);
    block = new_segment(pool, size, segment);
    if (!block && release_oversize(pool, size)) block = new_segment(pool, size, segment);
    if (!block) {
      ++stats_.retries;
      release_free_segments();
      block = new_segment(pool, size, segment);
    }
  }
  if (!block) return false;
  if (should_split(pool, block, size)) block = split(pool, block, size);
  block->allocated = true;
  active_[id] = block;
  stats_.allocated += block->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return true;
}

// get_free_block: the best fit, with the oversize rules and expandable segments' tail rule.
CachingAllocatorModel::Block* CachingAllocatorModel::take_free_block(Pool& pool, int64_t size) {
  Block key;
  key.size = size;
  key.address = -1;
  auto it = pool.free.lower_bound(&key);
  if (it == pool.free.end()) return nullptr;
  if (options_.expandable_segments) {
    // A block before address space without memory counts as the size it can grow to, so for
    // best fit a larger block elsewhere is taken before it.
    auto expandable_size = [](const Block* b) {
      return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
    };
    for (auto next = std::next(it);
         next != pool.free.end() && expandable_size(*next) < expandable_size(*it); ++next) {
      it = next;
    }
  }
  const int64_t max_split = options_.max_split_size;
  if (size < max_split && (*it)->size >= max_split) return nullptr;
  if (size >= max_split && (*it)->size >= size + kLargeBuffer) return nullptr;
  Block* block = *it;
  pool.free.erase(it);
  return block;
}

bool CachingAllocatorModel::should_split(const Pool& pool, const Block* block, int64_t size) const {
  const int64_t remaining = block->size - size;
  if (pool.small || options_.expandable_segments) return remaining >= kMinBlockSize;
  return size < options_.max_split_size && remaining > kSmallSize;
}

CachingAllocatorModel::Block* CachingAllocatorModel::split(Pool& pool, Block* block, int64_t size) {
  auto front = std::make_unique<Block>();
  Block* taken = front.get();
  taken->address = block->address;
  taken->size = size;
  taken->prev = block->prev;
  if (taken->prev) taken->prev->next = taken;
  taken->next = block;
  block->prev = taken;
  block->address += size;
  block->size -= size;
  pool.owned.emplace(taken, std::move(front));
  insert_free(pool, block);
  return taken;
}

CachingAllocatorModel::Block* CachingAllocatorModel::new_segment(Pool& pool, int64_t /*size*/,
                                                                 int64_t segment_size) {
  if (options_.limit > 0 && stats_.reserved + segment_size > options_.limit) return nullptr;
  auto owned = std::make_unique<Block>();
  Block* block = owned.get();
  block->address = next_address_;
  block->size = segment_size;
  next_address_ += segment_size + kRoundLarge;  // segments are never neighbours
  pool.owned.emplace(block, std::move(owned));
  stats_.reserved += segment_size;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.segments;
  return block;
}

// try_allocate_expandable_block. find_expandable_block: the first address space without memory
// (by address), joined to the free block before it, with room for the request; map_block maps
// whole pages of it, which merge with their free neighbours.
CachingAllocatorModel::Block* CachingAllocatorModel::grow_expandable(Pool& pool, int64_t size) {
  if (pool.base < 0) {
    auto owned = std::make_unique<Block>();
    owned->address = pool.base = next_address_;
    // ExpandableSegment: max_handles_ = numSegments(totalGlobalMem + totalGlobalMem / 8), in the
    // pool's pages (segment_size_).
    const int64_t memory = options_.device_memory, page = pool.page();
    owned->size = memory > 0 ? page * ((memory + memory / 8 + page - 1) / page) : kAddressSpan;
    owned->mapped = false;
    next_address_ += owned->size + kRoundLarge;
    pool.unmapped.insert(owned.get());
    pool.owned.emplace(owned.get(), std::move(owned));
    ++stats_.segments;
  }
  Block* candidate = nullptr;
  for (Block* space : pool.unmapped) {
    Block* start = space->prev && !space->prev->allocated ? space->prev : space;
    int64_t room = 0;
    for (Block* b = start; b && !b->allocated && room < size; b = b->next) room += b->size;
    if (room >= size) {
      candidate = start;
      break;
    }
  }
  if (!candidate) return nullptr;
  if (!candidate->mapped && !map_pages(pool, candidate, std::min(candidate->size, size)))
    return nullptr;
  while (candidate->size < size) {  // free, then address space without memory
    Block* space = candidate->next;
    if (!map_pages(pool, space, std::min(size - candidate->size, space->size))) return nullptr;
    candidate = space;  // merged with the free block before it
  }
  erase_free(pool, candidate);
  return candidate;
}

// map_block: `bytes` of `space` (page-aligned, without memory) rounded up to whole pages get
// memory; the rest stays without. False (nothing changed) when the limit would be passed.
bool CachingAllocatorModel::map_pages(Pool& pool, Block* space, int64_t bytes) {
  const int64_t mapped =
      std::min(space->size, pool.page() * ((bytes + pool.page() - 1) / pool.page()));
  if (options_.limit > 0 && stats_.reserved + mapped > options_.limit) return false;
  pool.unmapped.erase(space);
  if (mapped < space->size) {
    auto owned = std::make_unique<Block>();
    Block* rest = owned.get();
    rest->address = space->address + mapped;
    rest->size = space->size - mapped;
    rest->mapped = false;
    rest->prev = space;
    rest->next = space->next;
    if (rest->next) rest->next->prev = rest;
    space->next = rest;
    space->size = mapped;
    pool.owned.emplace(rest, std::move(owned));
    pool.unmapped.insert(rest);
  }
  space->mapped = true;
  stats_.reserved += mapped;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  merge_free_neighbours(pool, space);
  insert_free(pool, space);
  return true;
}

// release_available_cached_blocks: with max_split_size_mb, free one oversize cached segment large
// enough, or several from the largest down until enough is freed.
bool CachingAllocatorModel::release_oversize(Pool& pool, int64_t size) {
  const int64_t max_split = options_.max_split_size;
  if (max_split == AllocatorOptions{}.max_split_size) return false;
  Block key;
  key.size = std::max(size, max_split);
  key.address = -1;
  auto it = pool.free.lower_bound(&key);
  if (it != pool.free.end()) {
    if ((*it)->is_split()) return false;
    release_segment(pool, *it);
    return true;
  }
  int64_t released = 0;
  std::vector<Block*> oversize;
  for (auto r = pool.free.rbegin(); r != pool.free.rend() && (*r)->size >= max_split; ++r) {
    if (!(*r)->is_split()) oversize.push_back(*r);
  }
  for (Block* block : oversize) {
    if (released >= key.size) break;
    released += block->size;
    release_segment(pool, block);
  }
  return released >= key.size;
}

void CachingAllocatorModel::release_segment(Pool& pool, Block* block) {
  erase_free(pool, block);
  stats_.reserved -= block->size;
  --stats_.segments;
  pool.owned.erase(block);
}

// release_cached_blocks: every free segment that is not split goes back; in an expandable
// segment, unmap_block takes the memory from the whole pages inside every free block.
void CachingAllocatorModel::release_free_segments() {
  for (Pool* pool : {small_.get(), large_.get()}) {
    const std::vector<Block*> free_blocks(pool->free.begin(), pool->free.end());
    for (Block* block : free_blocks) {
      if (options_.expandable_segments) {
        unmap_pages(*pool, block);
      } else if (!block->is_split()) {
        release_segment(*pool, block);
      }
    }
  }
}

// unmap_block: the whole pages inside free `block` lose their memory; what is left before and
// after them stays a free block of its own.
void CachingAllocatorModel::unmap_pages(Pool& pool, Block* block) {
  const int64_t page = pool.page();
  const int64_t offset = block->address - pool.base;
  const int64_t begin = pool.base + page * ((offset + page - 1) / page);
  const int64_t end = pool.base + page * ((offset + block->size) / page);
  if (begin >= end) return;
  erase_free(pool, block);
  auto piece = [&](int64_t address, int64_t size, Block* prev, Block* next) {
    auto owned = std::make_unique<Block>();
    Block* made = owned.get();
    made->address = address;
    made->size = size;
    made->prev = prev;
    made->next = next;
    if (prev) prev->next = made;
    if (next) next->prev = made;
    pool.owned.emplace(made, std::move(owned));
    insert_free(pool, made);
  };
  if (begin > block->address) piece(block->address, begin - block->address, block->prev, block);
  if (block->address + block->size > end)
    piece(end, block->address + block->size - end, block, block->next);
  block->address = begin;
  block->size = end - begin;
  block->mapped = false;
  stats_.reserved -= block->size;
  merge_free_neighbours(pool, block);
  pool.unmapped.insert(block);
  if (!block->prev && !block->next) {  // release_expandable_segment: the whole segment is empty
    pool.unmapped.erase(block);
    pool.owned.erase(block);
    pool.base = -1;
    --stats_.segments;
  }
}

// try_merge_blocks: a block absorbs each neighbour that is free and as mapped as it is.
void CachingAllocatorModel::merge_free_neighbours(Pool& pool, Block* block) {
  for (Block* neighbour : {block->prev, block->next}) {
    if (!neighbour || neighbour->allocated || neighbour->mapped != block->mapped) continue;
    if (neighbour->mapped) {
      pool.free.erase(neighbour);
    } else {
      pool.unmapped.erase(neighbour);
    }
    if (neighbour == block->prev) {
      block->address = neighbour->address;
      block->prev = neighbour->prev;
      if (block->prev) block->prev->next = block;
    } else {
      block->next = neighbour->next;
      if (block->next) block->next->prev = block;
    }
    block->size += neighbour->size;
    pool.owned.erase(neighbour);
  }
}

// free_block: merge with the free neighbours, then back into the pool.
void CachingAllocatorModel::free(int64_t id) {
  const auto found = active_.find(id);
  if (found == active_.end()) return;
  Block* block = found->second;
  active_.erase(found);
  stats_.allocated -= block->size;
  block->allocated = false;
  Pool& pool = pool_of(block);
  merge_free_neighbours(pool, block);
  insert_free(pool, block);
}

}  // namespace training
