// Size-classed caching allocator: see memory_pool.h. Size classes: 4 per power of two above
// 4 KiB (at most 25% slack), one 4 KiB class below.
#include "server/runtime/memory_pool.h"

#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"

namespace matserve::server {

MemoryPool::MemoryPool(RawAllocator raw, std::int64_t budget_bytes)
    : raw_(std::move(raw)), budget_(budget_bytes) {
  stats_.budget_bytes = budget_bytes;
}

MemoryPool::~MemoryPool() {
  trim();
}

std::size_t MemoryPool::size_class(std::size_t bytes) {
  constexpr std::size_t kMin = 4096;
  if (bytes <= kMin) return kMin;
  const std::size_t top = std::bit_floor(bytes);
  const std::size_t step = std::max<std::size_t>(top / 4, 1);
  return (bytes + step - 1) / step * step;
}

absl::StatusOr<MemoryPool::Block> MemoryPool::allocate(std::size_t bytes, bool long_lived) {
  const std::size_t cap = size_class(bytes);
  absl::MutexLock lock(&mu_);
  if (stats_.in_use_bytes + static_cast<std::int64_t>(cap) > budget_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(raw_.name, ": ", cap, " bytes would exceed the budget of ", budget_,
                     " bytes (", stats_.in_use_bytes, " in use, of which ", stats_.long_lived_bytes,
                     " by resident matrices)"));
  }
  void* p = nullptr;
  if (auto it = free_.find(cap); it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= static_cast<std::int64_t>(cap);
    ++stats_.hits;
  } else {
    // Keep in-use plus cached within the budget: drop cached blocks of other sizes first.
    trim_locked(cap);
    p = raw_.allocate(cap);
    if (p == nullptr) {
      trim_locked(SIZE_MAX);
      p = raw_.allocate(cap);
    }
    if (p == nullptr) {
      ++stats_.raw_failures;
      return absl::ResourceExhaustedError(absl::StrCat(raw_.name, ": out of memory allocating ",
                                                       cap, " bytes (", stats_.in_use_bytes,
                                                       " in use)"));
    }
    ++stats_.misses;
  }
  stats_.in_use_bytes += static_cast<std::int64_t>(cap);
  if (long_lived) stats_.long_lived_bytes += static_cast<std::int64_t>(cap);
  return Block(this, p, bytes, cap, long_lived);
}

void MemoryPool::trim_locked(std::size_t need) {
  for (auto it = free_.begin(); it != free_.end();) {
    if (need != SIZE_MAX &&
        stats_.in_use_bytes + stats_.cached_bytes + static_cast<std::int64_t>(need) <= budget_) {
      return;
    }
    for (void* p : it->second) {
      raw_.release(p);
      stats_.cached_bytes -= static_cast<std::int64_t>(it->first);
    }
    it = free_.erase(it);
  }
}

void MemoryPool::give_back(void* p, std::size_t capacity, bool long_lived) {
  absl::MutexLock lock(&mu_);
  stats_.in_use_bytes -= static_cast<std::int64_t>(capacity);
  if (long_lived) stats_.long_lived_bytes -= static_cast<std::int64_t>(capacity);
  free_[capacity].push_back(p);
  stats_.cached_bytes += static_cast<std::int64_t>(capacity);
}

void MemoryPool::trim() {
  absl::MutexLock lock(&mu_);
  trim_locked(SIZE_MAX);
}

PoolStats MemoryPool::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace matserve::server
