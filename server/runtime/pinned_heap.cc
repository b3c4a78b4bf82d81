// First-fit pinned heap: see pinned_heap.h.
#include "server/runtime/pinned_heap.h"

#include <iterator>

namespace matserve::server {
namespace {

std::uintptr_t align_up(std::uintptr_t v, std::size_t a) {
  return (v + a - 1) / a * a;
}

}  // namespace

PinnedHeap::PinnedHeap(void* base, std::size_t bytes)
    : begin_(align_up(reinterpret_cast<std::uintptr_t>(base), kAlignment)),
      end_(reinterpret_cast<std::uintptr_t>(base) + bytes) {
  absl::MutexLock lock(&mu_);
  if (end_ > begin_) {
    const std::size_t usable = (end_ - begin_) / kAlignment * kAlignment;
    if (usable > 0) free_.emplace(begin_, usable);
    stats_.capacity_bytes = usable;
  }
}

void* PinnedHeap::allocate(std::size_t bytes) {
  if (bytes == 0 || bytes > end_ - begin_) {
    absl::MutexLock lock(&mu_);
    ++stats_.fallbacks;
    return nullptr;
  }
  const std::size_t want = align_up(bytes, kAlignment);
  absl::MutexLock lock(&mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const std::uintptr_t start = it->first;
    const std::size_t rest = it->second - want;
    free_.erase(it);
    if (rest > 0) free_.emplace(start + want, rest);
    used_.emplace(start, want);
    stats_.in_use_bytes += want;
    ++stats_.allocations;
    return reinterpret_cast<void*>(start);
  }
  ++stats_.fallbacks;
  return nullptr;
}

bool PinnedHeap::release(void* p) {
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  if (!contains(p)) return false;
  absl::MutexLock lock(&mu_);
  const auto used = used_.find(start);
  if (used == used_.end()) return false;
  const std::size_t block = used->second;
  used_.erase(used);
  stats_.in_use_bytes -= block;
  std::size_t size = block;
  // Merge with the free neighbours on either side.
  std::uintptr_t merged = start;
  auto next = free_.lower_bound(start);
  if (next != free_.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      merged = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && start + block == next->first) {
    size += next->second;
    free_.erase(next);
  }
  free_.emplace(merged, size);
  return true;
}

PinnedHeapStats PinnedHeap::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace matserve::server
