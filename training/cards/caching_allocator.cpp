#include "training/cards/caching_allocator.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <set>
#include <vector>

#include "training/cards/caching_allocator_blocks.h"

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

// increase_stat / decrease_stat: a statistic with its peak.
void increase_stat(int64_t& current, int64_t& peak, int64_t amount) {
  current += amount;
  peak = std::max(peak, current);
}

void decrease_stat(int64_t& current, int64_t amount) {
  current -= amount;
  TORCH_INTERNAL_ASSERT(current >= 0, "an allocator statistic below zero");
}

}  // namespace

int64_t CachingAllocatorModel::Pool::page() const {
  return small ? kSmallBuffer : kLargeBuffer;
}

// AllocParams: a request, its pool, and the block found for it.
struct CachingAllocatorModel::AllocParams {
  Pool& pool;
  int64_t size;
  Block* block = nullptr;
};

CachingAllocatorModel::CachingAllocatorModel(AllocatorOptions options)
    : options_(options),
      small_(std::make_unique<Pool>(true)),
      large_(std::make_unique<Pool>(false)) {}

CachingAllocatorModel::~CachingAllocatorModel() = default;

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

// malloc: get_free_block || (trigger_free_memory_callbacks: none here) || alloc_block ||
// (release_available_cached_blocks && alloc_block) || (release_cached_blocks && alloc_block).
bool CachingAllocatorModel::allocate(int64_t id, int64_t bytes) {
  const int64_t size = round_size(bytes);
  AllocParams p{size <= kSmallSize ? *small_ : *large_, size};
  const bool found = get_free_block(p) || alloc_block(p, false) ||
                     (release_available_cached_blocks(p) && alloc_block(p, false)) ||
                     (release_cached_blocks() && alloc_block(p, true));
  if (!found) return false;
  Block* block = should_split(p.pool, p.block, size) ? split(p.pool, p.block, size) : p.block;
  block->allocated = true;
  block->requested = bytes;
  block->id = id;
  active_[id] = block;
  increase_stat(stats_.allocated, stats_.peak_allocated, block->size);
  TORCH_INTERNAL_ASSERT(stats_.allocated <= stats_.reserved, "more bytes allocated than reserved");
  tell(AllocatorEvent::Action::Alloc, block->address, bytes, id);
  return true;
}

// get_free_block: the best fit, with the oversize rules and expandable segments' tail rule.
bool CachingAllocatorModel::get_free_block(AllocParams& p) {
  Block key{-1, p.size};
  auto it = p.pool.free.lower_bound(&key);
  if (it == p.pool.free.end()) return false;
  if (options_.expandable_segments) {
    // A block before address space without memory counts as the size it can grow to, so for
    // best fit a larger block elsewhere is taken before it.
    auto expandable_size = [](const Block* b) {
      return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
    };
    for (auto next = std::next(it);
         next != p.pool.free.end() && expandable_size(*next) < expandable_size(*it); ++next) {
      it = next;
    }
  }
  const int64_t max_split = options_.max_split_size;
  if (p.size < max_split && (*it)->size >= max_split) return false;
  if (p.size >= max_split && (*it)->size >= p.size + kLargeBuffer) return false;
  p.block = *it;
  p.pool.free.erase(it);
  return true;
}

// alloc_block: a new segment, or with expandable segments the pool's segment grown; a retry is
// counted (num_alloc_retries).
bool CachingAllocatorModel::alloc_block(AllocParams& p, bool is_retry) {
  if (is_retry) ++stats_.retries;
  p.block = options_.expandable_segments ? try_allocate_expandable_block(p.pool, p.size)
                                         : new_segment(p.pool, allocation_size(p.size));
  return p.block != nullptr;
}

bool CachingAllocatorModel::should_split(const Pool& pool, const Block* block, int64_t size) const {
  const int64_t remaining = block->size - size;
  if (pool.small || options_.expandable_segments) return remaining >= kMinBlockSize;
  return size < options_.max_split_size && remaining > kSmallSize;
}

CachingAllocatorModel::Block* CachingAllocatorModel::split(Pool& pool, Block* block, int64_t size) {
  Block* taken = pool.add(block->address, size);
  block->address += size;
  block->size -= size;
  taken->splice(block->prev, block);
  pool.free.insert(block);
  return taken;
}

CachingAllocatorModel::Block* CachingAllocatorModel::new_segment(Pool& pool, int64_t segment_size) {
  if (options_.limit > 0 && stats_.reserved + segment_size > options_.limit) return nullptr;
  Block* block = pool.add(next_address_, segment_size);
  next_address_ += segment_size + kRoundLarge;  // segments are never neighbours
  increase_stat(stats_.reserved, stats_.peak_reserved, segment_size);
  ++stats_.segments;
  tell(AllocatorEvent::Action::SegmentAlloc, block->address, segment_size);
  return block;
}

// find_expandable_block: the first address space without memory (by address), joined to the free
// block before it, with room for the request; map_block maps whole pages of it, which merge with
// their free neighbours.
CachingAllocatorModel::Block* CachingAllocatorModel::try_allocate_expandable_block(Pool& pool,
                                                                                   int64_t size) {
  if (pool.base < 0) {
    // ExpandableSegment: max_handles_ = numSegments(totalGlobalMem + totalGlobalMem / 8), in the
    // pool's pages (segment_size_).
    const int64_t memory = options_.device_memory, page = pool.page();
    const int64_t span =
        memory > 0 ? page * ((memory + memory / 8 + page - 1) / page) : kAddressSpan;
    pool.base = next_address_;
    pool.unmapped.insert(pool.add(next_address_, span, /*mapped=*/false));
    next_address_ += span + kRoundLarge;
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
  if (!candidate->mapped && !map_block(pool, candidate, std::min(candidate->size, size)))
    return nullptr;
  while (candidate->size < size) {  // free, then address space without memory
    Block* space = candidate->next;
    if (!map_block(pool, space, std::min(size - candidate->size, space->size))) return nullptr;
    candidate = space;  // merged with the free block before it
  }
  pool.free.erase(candidate);
  return candidate;
}

// map_block: `bytes` of `space` (page-aligned, without memory) rounded up to whole pages get
// memory; the rest stays without. False (nothing changed) when the limit would be passed.
bool CachingAllocatorModel::map_block(Pool& pool, Block* space, int64_t bytes) {
  const int64_t mapped =
      std::min(space->size, pool.page() * ((bytes + pool.page() - 1) / pool.page()));
  if (options_.limit > 0 && stats_.reserved + mapped > options_.limit) return false;
  pool.unmapped.erase(space);
  if (mapped < space->size) {
    Block* rest = pool.add(space->address + mapped, space->size - mapped, /*mapped=*/false);
    space->size = mapped;
    rest->splice(space, space->next);
    pool.unmapped.insert(rest);
  }
  space->mapped = true;
  increase_stat(stats_.reserved, stats_.peak_reserved, mapped);
  tell(AllocatorEvent::Action::SegmentMap, space->address, mapped);
  merge_free_neighbours(pool, space);
  pool.free.insert(space);
  return true;
}

// release_available_cached_blocks: with max_split_size_mb, free one oversize cached segment large
// enough, or several from the largest down until enough is freed; never an expandable segment.
bool CachingAllocatorModel::release_available_cached_blocks(const AllocParams& p) {
  const int64_t max_split = options_.max_split_size;
  if (max_split == AllocatorOptions{}.max_split_size || options_.expandable_segments) return false;
  Block key{-1, std::max(p.size, max_split)};
  auto it = p.pool.free.lower_bound(&key);
  if (it != p.pool.free.end()) {
    if ((*it)->is_split()) return false;
    release_block(p.pool, *it);
    return true;
  }
  int64_t released = 0;
  std::vector<Block*> oversize;
  for (auto r = p.pool.free.rbegin(); r != p.pool.free.rend() && (*r)->size >= max_split; ++r) {
    if (!(*r)->is_split()) oversize.push_back(*r);
  }
  for (Block* block : oversize) {
    if (released >= key.size) break;
    released += block->size;
    release_block(p.pool, block);
  }
  return released >= key.size;
}

void CachingAllocatorModel::release_block(Pool& pool, Block* block) {
  TORCH_INTERNAL_ASSERT(!block->is_split(), "a segment goes back whole");
  tell(AllocatorEvent::Action::SegmentFree, block->address, block->size);
  pool.free.erase(block);
  decrease_stat(stats_.reserved, block->size);
  decrease_stat(stats_.segments, 1);
  pool.owned.erase(block);
}

// release_cached_blocks: every free segment that is not split goes back; in an expandable
// segment, unmap_block takes the memory from the whole pages inside every free block.
bool CachingAllocatorModel::release_cached_blocks() {
  for (Pool* pool : {small_.get(), large_.get()}) {
    const std::vector<Block*> free_blocks(pool->free.begin(), pool->free.end());
    for (Block* block : free_blocks) {
      if (options_.expandable_segments) {
        unmap_block(*pool, block);
      } else if (!block->is_split()) {
        release_block(*pool, block);
      }
    }
  }
  return true;
}

// unmap_block: the whole pages inside free `block` lose their memory; what is left before and
// after them stays a free block of its own.
void CachingAllocatorModel::unmap_block(Pool& pool, Block* block) {
  const int64_t page = pool.page();
  const int64_t offset = block->address - pool.base;
  const int64_t begin = pool.base + page * ((offset + page - 1) / page);
  const int64_t end = pool.base + page * ((offset + block->size) / page);
  if (begin >= end) return;
  tell(AllocatorEvent::Action::SegmentUnmap, begin, end - begin);
  pool.free.erase(block);
  const int64_t old_begin = block->address, old_end = block->address + block->size;
  block->address = begin;
  block->size = end - begin;
  block->mapped = false;
  auto piece = [&](int64_t address, int64_t size, Block* before, Block* after) {
    Block* made = pool.add(address, size);
    made->splice(before, after);
    pool.free.insert(made);
  };
  if (old_begin < begin) piece(old_begin, begin - old_begin, block->prev, block);
  if (end < old_end) piece(end, old_end - end, block, block->next);
  decrease_stat(stats_.reserved, block->size);
  merge_free_neighbours(pool, block);
  if (block->is_split()) {
    pool.unmapped.insert(block);
  } else {  // release_expandable_segment: the whole segment is empty
    pool.owned.erase(block);
    pool.base = -1;
    decrease_stat(stats_.segments, 1);
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
    if (neighbour == block->prev) block->address = neighbour->address;
    block->size += neighbour->size;
    neighbour->unlink();
    pool.owned.erase(neighbour);
  }
}

// free_block: merge with the free neighbours, then back into the pool.
void CachingAllocatorModel::free(int64_t id) {
  const auto found = active_.find(id);
  if (found == active_.end()) return;
  Block* block = found->second;
  active_.erase(found);
  decrease_stat(stats_.allocated, block->size);
  block->allocated = false;
  tell(AllocatorEvent::Action::Free, block->address, block->requested, id);
  Pool& pool = pool_of(block);
  merge_free_neighbours(pool, block);
  pool.free.insert(block);
}

void CachingAllocatorModel::set_listener(std::function<void(const AllocatorEvent&)> listener) {
  listener_ = std::move(listener);
}

void CachingAllocatorModel::tell(AllocatorEvent::Action action, int64_t address, int64_t size,
                                 int64_t id) const {
  if (listener_) listener_({action, address, size, id});
}

// snapshot(): a segment starts at each block with memory whose previous block has none (or that
// has no previous block) and runs over the blocks with memory after it.
std::vector<SegmentState> CachingAllocatorModel::segments() const {
  std::vector<SegmentState> held;
  for (const Pool* pool : {small_.get(), large_.get()}) {
    for (const auto& [head, owned] : pool->owned) {
      if (!head->mapped || (head->prev && head->prev->mapped)) continue;
      SegmentState segment{head->address, 0, pool->small, options_.expandable_segments, {}};
      for (const Block* b = head; b && b->mapped; b = b->next) {
        segment.blocks.push_back({b->address, b->size, b->allocated,
                                  b->allocated ? b->requested : 0, b->allocated ? b->id : -1});
        segment.size += b->size;
      }
      held.push_back(std::move(segment));
    }
  }
  std::sort(held.begin(), held.end(),
            [](const SegmentState& a, const SegmentState& b) { return a.address < b.address; });
  return held;
}

}  // namespace training
