// The process's large-buffer heap: see message_memory.h.
#include "server/runtime/message_memory.h"

#include <atomic>
#include <cstdint>

namespace matserve::server::message_memory {
namespace {

// The only mutable globals of the mechanism. `heap` is null when none is installed; the bounds
// are those of the last installed region and stay set after uninstall(), so that blocks handed
// out before are still recognised (and ignored) when they are freed.
std::atomic<PinnedHeap*> heap{nullptr};
std::atomic<std::uintptr_t> region_begin{0};
std::atomic<std::uintptr_t> region_end{0};

bool in_region(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return a >= region_begin.load(std::memory_order_acquire) &&
         a < region_end.load(std::memory_order_acquire);
}

}  // namespace

void install(PinnedHeap* h) {
  if (h != nullptr) {
    region_begin.store(h->begin(), std::memory_order_release);
    region_end.store(h->end(), std::memory_order_release);
  }
  heap.store(h, std::memory_order_release);
}

void uninstall() {
  heap.store(nullptr, std::memory_order_release);
}

void* allocate(std::size_t bytes) {
  if (bytes < kMinBytes) return nullptr;
  PinnedHeap* h = heap.load(std::memory_order_acquire);
  return h == nullptr ? nullptr : h->allocate(bytes);
}

bool release(void* p) {
  if (!in_region(p)) return false;
  if (PinnedHeap* h = heap.load(std::memory_order_acquire); h != nullptr) h->release(p);
  return true;
}

bool is_pinned(const void* p, std::size_t bytes) {
  const PinnedHeap* h = heap.load(std::memory_order_acquire);
  return h != nullptr && h->contains(p, bytes);
}

PinnedHeapStats stats() {
  const PinnedHeap* h = heap.load(std::memory_order_acquire);
  return h == nullptr ? PinnedHeapStats{} : h->stats();
}

}  // namespace matserve::server::message_memory
