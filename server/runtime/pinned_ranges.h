// Host ranges pinned for DMA outside the pinned message heap: the shared-memory regions the CUDA
// backend registered with the driver. The staging code asks contains() and then copies to and
// from such a range by DMA where it is, with no staging copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace matserve::server {

class PinnedRanges {
 public:
  void add(const void* begin, std::size_t bytes);
  void remove(const void* begin);
  // True when [p, p + bytes) lies inside one added range.
  bool contains(const void* p, std::size_t bytes) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::uintptr_t, std::uintptr_t> ranges_ ABSL_GUARDED_BY(mu_);  // begin -> end
};

}  // namespace matserve::server
