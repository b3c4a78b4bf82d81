// A size-classed caching allocator with a budget, used for device memory (cudaMalloc), pinned host
// memory (cudaMallocHost) and the CPU backend's memory alike. Freed blocks go back to a free list
// of their size class instead of the driver, so a steady stream of requests never reaches the raw
// allocator; the budget bounds memory in use, and cached blocks are trimmed before it is exceeded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace matserve::server {

// How to get and return raw memory (e.g. cudaMalloc / cudaFree).
struct RawAllocator {
  std::string name;                                  // for messages: "cuda:0 device memory"
  std::function<void*(std::size_t bytes)> allocate;  // null on failure
  std::function<void(void* p)> release;
};

struct PoolStats {
  std::int64_t budget_bytes = 0;
  std::int64_t in_use_bytes = 0;      // blocks handed out (size-class capacity)
  std::int64_t long_lived_bytes = 0;  // of which held by resident matrices
  std::int64_t cached_bytes = 0;      // free blocks kept for reuse
  std::int64_t hits = 0;              // allocations served from the cache
  std::int64_t misses = 0;            // allocations that reached the raw allocator
  std::int64_t raw_failures = 0;      // raw allocations that failed (after trimming the cache)

  // What the resident matrices leave of the budget for requests' own blocks.
  std::int64_t request_bytes() const { return budget_bytes - long_lived_bytes; }
};

class MemoryPool {
 public:
  class Block;

  MemoryPool(RawAllocator raw, std::int64_t budget_bytes);
  ~MemoryPool();  // returns every cached block; blocks still handed out must be gone by then
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // RESOURCE_EXHAUSTED when the block would take memory in use above the budget, or the raw
  // allocator fails even after the cache was trimmed. `long_lived` marks resident matrices.
  absl::StatusOr<Block> allocate(std::size_t bytes, bool long_lived = false);

  // The capacity a request of `bytes` takes (its size class).
  static std::size_t size_class(std::size_t bytes);

  PoolStats stats() const;
  std::int64_t budget() const { return budget_; }
  // Returns every cached block to the raw allocator.
  void trim();

 private:
  void give_back(void* p, std::size_t capacity, bool long_lived);
  void trim_locked(std::size_t need) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RawAllocator raw_;
  const std::int64_t budget_;
  mutable absl::Mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);  // by capacity
  PoolStats stats_ ABSL_GUARDED_BY(mu_);
};

// A block of pool memory; returned to its pool's cache when destroyed. Move-only.
class MemoryPool::Block {
 public:
  Block() = default;
  Block(Block&& o) noexcept
      : pool_(std::exchange(o.pool_, nullptr)),
        ptr_(std::exchange(o.ptr_, nullptr)),
        bytes_(o.bytes_),
        capacity_(o.capacity_),
        long_lived_(o.long_lived_) {}
  Block& operator=(Block&& o) noexcept {
    if (this != &o) {
      reset();
      pool_ = std::exchange(o.pool_, nullptr);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = o.bytes_;
      capacity_ = o.capacity_;
      long_lived_ = o.long_lived_;
    }
    return *this;
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() { reset(); }

  // A view of device memory the pool does not own (a client's CUDA IPC allocation): used like a
  // block, never returned to a pool.
  static Block external(void* p, std::size_t bytes) {
    return Block(nullptr, p, bytes, bytes, false);
  }

  void* data() const { return ptr_; }
  std::size_t size() const { return bytes_; }
  std::size_t capacity() const { return capacity_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset() {
    if (pool_ != nullptr && ptr_ != nullptr) pool_->give_back(ptr_, capacity_, long_lived_);
    pool_ = nullptr;
    ptr_ = nullptr;
  }

 private:
  friend class MemoryPool;
  Block(MemoryPool* pool, void* p, std::size_t bytes, std::size_t capacity, bool long_lived)
      : pool_(pool), ptr_(p), bytes_(bytes), capacity_(capacity), long_lived_(long_lived) {}

  MemoryPool* pool_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t capacity_ = 0;
  bool long_lived_ = false;
};

}  // namespace matserve::server
