// Admission and queueing for one device: at most `slots` requests run at once (one per stream on a
// GPU); at most `max_queue` wait; a request is admitted only when a slot is free AND all the memory
// it needs could be taken from the device's pool, so nothing fails half-way for lack of memory.
// A request that could never fit (over the budget, or over what resident matrices leave free) is
// refused at once with RESOURCE_EXHAUSTED and the numbers; waiting ends at the deadline
// (DEADLINE_EXCEEDED) or when the client cancels (CANCELLED), releasing everything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/runtime/memory_pool.h"

namespace matserve::server {

// One block a request needs: transient (freed when the request ends) or long-lived (a result kept
// resident, moved out of the admission with take_block). An `if_room` block is one the request can
// do without: taken at admission when the pool has room for it once every other block is taken,
// else left empty; it is never waited for and never counted in the could-never-fit check.
struct BlockSpec {
  std::size_t bytes = 0;
  bool long_lived = false;
  bool if_room = false;
};

// When to stop waiting.
struct Waiter {
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> cancelled;  // may be empty
};

struct SchedulerStats {
  int slots = 0;
  int running = 0;
  int queued = 0;
  std::int64_t admitted = 0;
  std::int64_t rejected_memory = 0;  // could never fit
  std::int64_t rejected_queue = 0;   // queue full
  std::int64_t expired = 0;          // deadline passed or cancelled while queued
};

class DeviceScheduler {
 public:
  class Admission;

  DeviceScheduler(std::string label, int slots, int max_queue, MemoryPool& pool);

  // Waits for a slot and the blocks of `blocks` (allocated from the pool); the admission's block i
  // is blocks[i]'s (empty for an if_room block the pool had no room for).
  absl::StatusOr<Admission> admit(std::span<const BlockSpec> blocks, const Waiter& waiter);
  // Admits at once when a slot is free, nobody is waiting and the blocks fit now; otherwise
  // nullopt, counted nowhere (nothing was refused: the caller does without).
  std::optional<Admission> try_admit(std::span<const BlockSpec> blocks);

  SchedulerStats stats() const;
  const std::string& label() const { return label_; }
  MemoryPool& pool() { return pool_; }

 private:
  void release(int slot);
  bool slot_free() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !free_slots_.empty(); }
  // Every block of `specs` from the pool, then each if_room block there is room for; nullopt
  // (the blocks taken so far go back) when a needed block does not fit now.
  std::optional<std::vector<MemoryPool::Block>> take_blocks(std::span<const BlockSpec> specs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A free slot with `blocks`, counted as running.
  Admission grant(std::vector<MemoryPool::Block> blocks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string label_;
  const int max_queue_;
  MemoryPool& pool_;
  mutable absl::Mutex mu_;
  std::vector<int> free_slots_ ABSL_GUARDED_BY(mu_);
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);
};

// A running request: its slot and its memory, given back when destroyed.
class DeviceScheduler::Admission {
 public:
  Admission(Admission&& o) noexcept
      : owner_(std::exchange(o.owner_, nullptr)), slot_(o.slot_), blocks_(std::move(o.blocks_)) {}
  Admission& operator=(Admission&&) = delete;
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  ~Admission() {
    blocks_.clear();  // memory first, then the slot
    if (owner_ != nullptr) owner_->release(slot_);
  }

  int slot() const { return slot_; }
  MemoryPool::Block& block(std::size_t i) { return blocks_[i]; }
  MemoryPool::Block take_block(std::size_t i) { return std::move(blocks_[i]); }

 private:
  friend class DeviceScheduler;
  Admission(DeviceScheduler* owner, int slot, std::vector<MemoryPool::Block> blocks)
      : owner_(owner), slot_(slot), blocks_(std::move(blocks)) {}

  DeviceScheduler* owner_;
  int slot_;
  std::vector<MemoryPool::Block> blocks_;
};

}  // namespace matserve::server
