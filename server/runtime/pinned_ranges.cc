// Host ranges pinned for DMA: see pinned_ranges.h.
#include "server/runtime/pinned_ranges.h"

namespace matserve::server {

void PinnedRanges::add(const void* begin, std::size_t bytes) {
  const auto b = reinterpret_cast<std::uintptr_t>(begin);
  absl::MutexLock lock(&mu_);
  ranges_[b] = b + bytes;
}

void PinnedRanges::remove(const void* begin) {
  absl::MutexLock lock(&mu_);
  ranges_.erase(reinterpret_cast<std::uintptr_t>(begin));
}

bool PinnedRanges::contains(const void* p, std::size_t bytes) const {
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  absl::ReaderMutexLock lock(&mu_);
  auto it = ranges_.upper_bound(b);  // the first range starting after p
  if (it == ranges_.begin()) return false;
  --it;
  return b >= it->first && b + bytes <= it->second;
}

}  // namespace matserve::server
