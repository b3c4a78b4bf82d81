// A first-fit heap over one caller-owned region of host memory, meant for a region of pinned
// (page-locked) memory: large request and reply buffers placed in it reach the device by DMA
// straight from where gRPC's parser wrote them, with no copy through a staging ring. The heap
// only does the bookkeeping (thread-safe; aligned, coalescing free list); it never touches the
// region's bytes, so it is tested on ordinary memory. allocate() returns nullptr when no free
// range fits: callers fall back to ordinary memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "absl/synchronization/mutex.h"

namespace matserve::server {

struct PinnedHeapStats {
  std::size_t capacity_bytes = 0;
  std::size_t in_use_bytes = 0;
  std::int64_t allocations = 0;  // served from the region
  std::int64_t fallbacks = 0;    // asked for but did not fit (served elsewhere by the caller)
};

class PinnedHeap {
 public:
  static constexpr std::size_t kAlignment = 256;

  // The region [base, base + bytes) must outlive the heap and every block handed out.
  PinnedHeap(void* base, std::size_t bytes);
  PinnedHeap(const PinnedHeap&) = delete;
  PinnedHeap& operator=(const PinnedHeap&) = delete;

  // A block of at least `bytes` (rounded up to kAlignment), or nullptr when none fits.
  void* allocate(std::size_t bytes);
  // Returns a block from allocate(); false (and nothing done) for any other pointer.
  bool release(void* p);
  // True when [p, p + bytes) lies inside the region.
  bool contains(const void* p, std::size_t bytes = 1) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return a >= begin_ && bytes <= end_ - begin_ && a - begin_ <= end_ - begin_ - bytes;
  }
  PinnedHeapStats stats() const;
  std::uintptr_t begin() const { return begin_; }
  std::uintptr_t end() const { return end_; }

 private:
  const std::uintptr_t begin_;
  const std::uintptr_t end_;
  mutable absl::Mutex mu_;
  std::map<std::uintptr_t, std::size_t> free_ ABSL_GUARDED_BY(mu_);  // start -> size, disjoint
  std::map<std::uintptr_t, std::size_t> used_ ABSL_GUARDED_BY(mu_);  // start -> size
  PinnedHeapStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matserve::server
