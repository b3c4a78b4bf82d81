// Where the process's large buffers live: the one owner of the pinned heap that large request and
// reply buffers (a protobuf message's bytes fields: operands parsed from gRPC, results written for
// the reply) are placed in. The CUDA backend sets a heap over pinned memory aside
// (Backend::message_heap) and main.cc installs it for the backend's lifetime (Installation); the
// server binary's operator new (server/pinned_operator_new.cc) asks allocate() for every block of
// kMinBytes or more and falls back to malloc when it returns nullptr; the staging code asks
// is_pinned() and sends such buffers to the device by DMA with no staging copy. With no heap
// installed (CPU backend, tests, --pinned_message_bytes=0) nothing changes.
#pragma once

#include <cstddef>

#include "server/runtime/pinned_heap.h"

namespace matserve::server::message_memory {

// Blocks smaller than this never go to the heap (a DMA's set-up costs more than staging them).
inline constexpr std::size_t kMinBytes = std::size_t{1} << 20;

// Serves large blocks from `heap` from now on. At most one heap at a time; install and uninstall
// must not race with allocations (they run at start-up and shutdown).
void install(PinnedHeap* heap);
// Stops serving blocks from the heap, which the caller then destroys with its region. Blocks
// still held are forgotten: release() keeps recognising the retired region and ignores them.
void uninstall();

// Installs `heap` (may be null: nothing) for this object's lifetime; destroy it before the heap.
class Installation {
 public:
  explicit Installation(PinnedHeap* heap) : installed_(heap != nullptr) {
    if (installed_) install(heap);
  }
  ~Installation() {
    if (installed_) uninstall();
  }
  Installation(const Installation&) = delete;
  Installation& operator=(const Installation&) = delete;

 private:
  bool installed_;
};

// A block from the heap, or nullptr (no heap, too small, or no room).
void* allocate(std::size_t bytes);
// True when `p` belongs to the heap's region (returned to the heap, or ignored once retired);
// false for every other pointer, which the caller frees itself.
bool release(void* p);
// True when [p, p + bytes) lies in the installed heap's pinned region.
bool is_pinned(const void* p, std::size_t bytes);
// The installed heap's counters; all zero without one.
PinnedHeapStats stats();

}  // namespace matserve::server::message_memory
