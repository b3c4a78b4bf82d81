// Device admission and queueing: see device_scheduler.h.
#include "server/runtime/device_scheduler.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace matserve::server {
namespace {

// How often a queued request re-checks memory, its deadline and cancellation.
constexpr absl::Duration kPoll = absl::Milliseconds(2);

}  // namespace

DeviceScheduler::DeviceScheduler(std::string label, int slots, int max_queue, MemoryPool& pool)
    : label_(std::move(label)), max_queue_(max_queue), pool_(pool) {
  for (int i = slots - 1; i >= 0; --i) free_slots_.push_back(i);
  stats_.slots = slots;
}

absl::StatusOr<DeviceScheduler::Admission> DeviceScheduler::admit(std::span<const BlockSpec> specs,
                                                                  const Waiter& waiter) {
  std::int64_t need = 0;
  for (const BlockSpec& s : specs) {
    if (!s.if_room) need += static_cast<std::int64_t>(MemoryPool::size_class(s.bytes));
  }
  const PoolStats ps = pool_.stats();
  absl::MutexLock lock(&mu_);
  if (need > ps.request_bytes()) {
    ++stats_.rejected_memory;
    return absl::ResourceExhaustedError(absl::StrCat(
        label_, ": the request needs ", need, " bytes of memory; the budget is ", ps.budget_bytes,
        " bytes (--memory_budget_bytes), of which resident matrices hold ", ps.long_lived_bytes));
  }
  if (stats_.queued >= max_queue_) {
    ++stats_.rejected_queue;
    return absl::ResourceExhaustedError(absl::StrCat(label_, ": queue full (", stats_.queued,
                                                     " requests waiting; --max_queue_per_device)"));
  }
  ++stats_.queued;
  // Cancellation is asked only before waiting: on gRPC's sync API IsCancelled() polls the call's
  // completion queue (tens of microseconds), too dear for a request that finds a free slot.
  for (bool waited = false;; waited = true) {
    if (absl::Now() >= waiter.deadline) {
      --stats_.queued;
      ++stats_.expired;
      return absl::DeadlineExceededError(absl::StrCat("deadline passed while queued on ", label_));
    }
    if (waited && waiter.cancelled && waiter.cancelled()) {
      --stats_.queued;
      ++stats_.expired;
      return absl::CancelledError(absl::StrCat("cancelled by the client while queued on ", label_));
    }
    if (!free_slots_.empty()) {
      if (std::optional<std::vector<MemoryPool::Block>> blocks = take_blocks(specs)) {
        --stats_.queued;
        return grant(*std::move(blocks));
      }
      // Not enough memory now: the blocks taken so far go back; wait for others to finish.
      mu_.Unlock();
      absl::SleepFor(kPoll);
      mu_.Lock();
      continue;
    }
    mu_.AwaitWithTimeout(absl::Condition(this, &DeviceScheduler::slot_free), kPoll);
  }
}

std::optional<DeviceScheduler::Admission> DeviceScheduler::try_admit(
    std::span<const BlockSpec> specs) {
  absl::MutexLock lock(&mu_);
  if (free_slots_.empty() || stats_.queued > 0) return std::nullopt;
  std::optional<std::vector<MemoryPool::Block>> blocks = take_blocks(specs);
  if (!blocks) return std::nullopt;
  return grant(*std::move(blocks));
}

std::optional<std::vector<MemoryPool::Block>> DeviceScheduler::take_blocks(
    std::span<const BlockSpec> specs) {
  std::vector<MemoryPool::Block> blocks(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].if_room) continue;
    absl::StatusOr<MemoryPool::Block> b = pool_.allocate(specs[i].bytes, specs[i].long_lived);
    if (!b.ok()) return std::nullopt;
    blocks[i] = *std::move(b);
  }
  // The blocks the request can do without, once it holds every block it needs.
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].if_room) continue;
    absl::StatusOr<MemoryPool::Block> b = pool_.allocate(specs[i].bytes, specs[i].long_lived);
    if (b.ok()) blocks[i] = *std::move(b);
  }
  return blocks;
}

DeviceScheduler::Admission DeviceScheduler::grant(std::vector<MemoryPool::Block> blocks) {
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  ++stats_.running;
  ++stats_.admitted;
  return Admission(this, slot, std::move(blocks));
}

void DeviceScheduler::release(int slot) {
  absl::MutexLock lock(&mu_);
  free_slots_.push_back(slot);
  --stats_.running;
}

SchedulerStats DeviceScheduler::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace matserve::server
