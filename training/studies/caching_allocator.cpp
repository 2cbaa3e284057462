#include "training/studies/caching_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "training/platform/errors.h"

namespace training {

namespace {

// The constants of CUDACachingAllocator.cpp.
constexpr int64_t kMinBlockSize = 512;
constexpr int64_t kSmallSize = kMiB;
constexpr int64_t kSmallBuffer = 2 * kMiB;
constexpr int64_t kLargeBuffer = 20 * kMiB;
constexpr int64_t kMinLargeAlloc = 10 * kMiB;
constexpr int64_t kRoundLarge = 2 * kMiB;
// Addresses: each segment starts past the previous one; an expandable pool's segment spans this.
constexpr int64_t kAddressSpan = int64_t{1} << 46;

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
  explicit Pool(bool is_small) : small(is_small) {}
  bool small;
  std::set<Block*, BySizeThenAddress> free;
  std::unordered_map<Block*, std::unique_ptr<Block>> owned;
  // expandable_segments: the pool's one segment, [base, mapped_end), and its last block.
  int64_t base = -1, mapped_end = 0;
  Block* last = nullptr;
  int64_t page() const { return small ? kSmallBuffer : kLargeBuffer; }
};

AllocatorOptions parse_alloc_conf(const std::string& text) {
  AllocatorOptions options;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(std::remove_if(item.begin(), item.end(), ::isspace), item.end());
    if (item.empty()) continue;
    const auto colon = item.find(':');
    const std::string key = item.substr(0, colon);
    const std::string value = colon == std::string::npos ? "" : item.substr(colon + 1);
    auto refuse = [&](const std::string& expected) {
      throw UserError("PYTORCH_CUDA_ALLOC_CONF: " + key + ": expected " + expected + ", got '" +
                      value + "'");
    };
    if (key == "max_split_size_mb") {
      if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
          value.size() > 9 || std::stoll(value) * kMiB <= kLargeBuffer) {
        refuse("a whole number of MiB above 20");
      }
      options.max_split_size = std::stoll(value) * kMiB;
    } else if (key == "expandable_segments") {
      if (value != "True" && value != "False") refuse("True or False");
      options.expandable_segments = value == "True";
    } else {
      throw UserError("PYTORCH_CUDA_ALLOC_CONF: " + key +
                      ": not modelled (the card prediction follows max_split_size_mb and "
                      "expandable_segments only)");
    }
  }
  return options;
}

AllocatorOptions alloc_conf_from_environment() {
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  return parse_alloc_conf(conf ? conf : "");
}

std::string alloc_conf_text(const AllocatorOptions& options) {
  std::string text;
  if (options.max_split_size != AllocatorOptions{}.max_split_size) {
    text = "max_split_size_mb:" + std::to_string(options.max_split_size / kMiB);
  }
  if (options.expandable_segments)
    text += std::string(text.empty() ? "" : ",") + "expandable_segments:True";
  return text;
}

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
    // The block at the segment's end can grow without limit, so for best fit it is the largest:
    // a larger block elsewhere in the pool is taken before it.
    if (*it == pool.last && std::next(it) != pool.free.end()) ++it;
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

// try_allocate_expandable_block: map pages at the segment's end, joined to a free block there.
CachingAllocatorModel::Block* CachingAllocatorModel::grow_expandable(Pool& pool, int64_t size) {
  if (pool.base < 0) {
    pool.base = next_address_;
    pool.mapped_end = pool.base;
    next_address_ += kAddressSpan;
    ++stats_.segments;
  }
  Block* tail = pool.last && !pool.last->allocated ? pool.last : nullptr;
  const int64_t need = size - (tail ? tail->size : 0);
  const int64_t pages = pool.page() * ((need + pool.page() - 1) / pool.page());
  if (options_.limit > 0 && stats_.reserved + pages > options_.limit) return nullptr;
  stats_.reserved += pages;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  if (tail) {
    erase_free(pool, tail);
    tail->size += pages;
  } else {
    auto owned = std::make_unique<Block>();
    tail = owned.get();
    tail->address = pool.mapped_end;
    tail->size = pages;
    tail->prev = pool.last;
    if (pool.last) pool.last->next = tail;
    pool.last = tail;
    pool.owned.emplace(tail, std::move(owned));
  }
  pool.mapped_end += pages;
  return tail;
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

// release_cached_blocks: every free segment that is not split goes back; expandable segments
// unmap the whole pages of the free block at their end.
void CachingAllocatorModel::release_free_segments() {
  for (Pool* pool : {small_.get(), large_.get()}) {
    if (options_.expandable_segments) {
      Block* tail = pool->last;
      if (!tail || tail->allocated) continue;
      const int64_t offset = tail->address - pool->base;
      const int64_t first_page =
          pool->base + pool->page() * ((offset + pool->page() - 1) / pool->page());
      const int64_t unmapped = pool->mapped_end - first_page;
      if (unmapped <= 0) continue;
      erase_free(*pool, tail);
      stats_.reserved -= unmapped;
      pool->mapped_end = first_page;
      tail->size -= unmapped;
      if (tail->size > 0) {
        insert_free(*pool, tail);
      } else {
        pool->last = tail->prev;
        if (pool->last) pool->last->next = nullptr;
        pool->owned.erase(tail);
      }
      continue;
    }
    std::vector<Block*> whole;
    for (Block* block : pool->free) {
      if (!block->is_split()) whole.push_back(block);
    }
    for (Block* block : whole) release_segment(*pool, block);
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
  for (Block* neighbour : {block->prev, block->next}) {
    if (!neighbour || neighbour->allocated) continue;
    erase_free(pool, neighbour);
    if (neighbour == block->prev) {
      block->address = neighbour->address;
      block->prev = neighbour->prev;
      if (block->prev) block->prev->next = block;
    } else {
      block->next = neighbour->next;
      if (block->next) block->next->prev = block;
      if (pool.last == neighbour) pool.last = block;
    }
    block->size += neighbour->size;
    pool.owned.erase(neighbour);
  }
  insert_free(pool, block);
}

}  // namespace training
