// The one execution plan every operation follows, on either backend, stage by stage:
//
//   pick -> admit -> choose -> stage_in -> launch -> kernel_wait -> stage_out -> outcome -> keep
//
// pick: the device (the one holding the resident operands, else the least loaded). admit: an
// execution slot and every block of memory the operation declared (BlockPlan), all at once, so
// nothing fails half-way for lack of memory; blocks it can do without are taken only if there is
// room then. choose: the variant, on the exact problem the kernel will see (pointers included,
// bound to the admitted blocks first), before any device work, so its host cost is no stage's
// time; nothing else (no copies listed, no memory taken). stage_in: the operands' copies in.
// launch: the device work enqueued. kernel_wait: its end. stage_out: the result's copies out.
// outcome: what ran, where, its stage times and its work. keep: results that stay in the backend's
// memory become resident matrices.
//
// A backend writes one Operation per operation (GEMM, batched GEMM, transpose) with these steps;
// execute() owns their order, the queue time, the trace marks, and the clean-up after a failure:
// abandon() runs before the admission's blocks go back to the pool, so no block is reused while
// device work queued on it may still touch it.
#pragma once

#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "server/runtime/device_scheduler.h"
#include "server/runtime/jobs.h"
#include "server/runtime/memory_pool.h"

namespace matserve::server {

// Names one block of an operation's admitted memory.
struct BlockId {
  std::size_t index = 0;
};

// The memory an operation needs for its whole run, declared before admission.
class BlockPlan {
 public:
  // A block freed when the operation ends, or, long-lived, one a kept result moves out of it.
  BlockId add(std::size_t bytes, bool long_lived = false) {
    specs_.push_back({bytes, long_lived});
    return BlockId{specs_.size() - 1};
  }
  // A block only when `needed`.
  std::optional<BlockId> add_if(bool needed, std::size_t bytes, bool long_lived = false) {
    if (!needed) return std::nullopt;
    return add(bytes, long_lived);
  }
  // When `wanted`, a block the operation can do without: admitted when the pool has room for it
  // then, else absent (AdmittedMemory::has); admission never waits for it (BlockSpec::if_room).
  std::optional<BlockId> add_if_room(bool wanted, std::size_t bytes, bool long_lived = false) {
    if (!wanted) return std::nullopt;
    specs_.push_back({bytes, long_lived, /*if_room=*/true});
    return BlockId{specs_.size() - 1};
  }
  std::span<const BlockSpec> specs() const { return specs_; }

 private:
  std::vector<BlockSpec> specs_;
};

// An admitted operation: its execution slot and its blocks, by the ids its plan gave.
class AdmittedMemory {
 public:
  explicit AdmittedMemory(DeviceScheduler::Admission& admission) : admission_(admission) {}

  int slot() const { return admission_.slot(); }
  // Null for an if-room block the pool had no room for.
  void* data(BlockId id) { return admission_.block(id.index).data(); }
  // Whether the block was admitted (always, except an if-room block the pool had no room for).
  bool has(BlockId id) { return data(id) != nullptr; }
  // Moves a long-lived block out (a kept result); the admission no longer frees it.
  MemoryPool::Block take(BlockId id) { return admission_.take_block(id.index); }
  // Gives a block back to the pool now: one the operation turned out not to need (an if-room block
  // its choice did not use), before any device work could touch it.
  void release(BlockId id) { admission_.block(id.index).reset(); }

 private:
  DeviceScheduler::Admission& admission_;
};

// One operation's steps, in the order execute() calls them. A step that fails ends the run with
// its status; the later steps are not called.
template <typename Op>
concept Operation = requires(Op op, BlockPlan& plan, AdmittedMemory& memory, Outcome& outcome) {
  // Where it runs (may refuse: devices disagree, the device is unhealthy).
  { op.pick() } -> std::same_as<absl::StatusOr<DeviceScheduler*>>;
  { op.plan_memory(plan) } -> std::same_as<void>;
  // Binds the admitted blocks (the pointers the kernel will see) and chooses the variant on that
  // exact problem; may give back if-room blocks the choice leaves unused.
  { op.choose(memory) } -> std::same_as<absl::Status>;
  { op.stage_in() } -> std::same_as<absl::Status>;
  { op.launch(outcome) } -> std::same_as<absl::Status>;  // sets launch_us / launch_path if any
  { op.wait_kernel() } -> std::same_as<absl::Status>;
  { op.stage_out(outcome) } -> std::same_as<absl::Status>;  // sets device_to_host_us if any
  { op.record(outcome) } -> std::same_as<void>;             // variant, device, work, times
  { op.keep(memory, outcome) } -> std::same_as<void>;       // resident results
  // After a failed step, with the slot held: waits for device work already queued.
  { op.abandon() } -> std::same_as<void>;
};

namespace plan_detail {

template <Operation Op>
absl::Status run_admitted(Op& op, AdmittedMemory& memory, Outcome& outcome) {
  StageMarks& marks = outcome.marks;
  if (absl::Status s = op.choose(memory); !s.ok()) return s;
  marks.mark("choose");
  if (absl::Status s = op.stage_in(); !s.ok()) return s;
  marks.mark("stage_in");
  if (absl::Status s = op.launch(outcome); !s.ok()) return s;
  marks.mark("launch");
  if (absl::Status s = op.wait_kernel(); !s.ok()) return s;
  marks.mark("kernel_wait");
  if (absl::Status s = op.stage_out(outcome); !s.ok()) return s;
  marks.mark("stage_out");
  op.record(outcome);
  op.keep(memory, outcome);
  marks.mark("outcome");
  return absl::OkStatus();
}

}  // namespace plan_detail

// Runs `op` through the plan: fills `outcome` (queue time here, the rest by the steps) and
// returns the first failing step's status.
template <Operation Op>
absl::Status execute(Op& op, const Waiter& waiter, Outcome& outcome) {
  const absl::Time queued = absl::Now();
  absl::StatusOr<DeviceScheduler*> scheduler = op.pick();
  if (!scheduler.ok()) return scheduler.status();
  outcome.marks.mark("pick");
  BlockPlan plan;
  op.plan_memory(plan);
  absl::StatusOr<DeviceScheduler::Admission> admission = (*scheduler)->admit(plan.specs(), waiter);
  if (!admission.ok()) return admission.status();
  outcome.times.queue_us = micros_since(queued);
  outcome.marks.mark("admit");
  AdmittedMemory memory(*admission);
  absl::Status status = plan_detail::run_admitted(op, memory, outcome);
  if (!status.ok()) op.abandon();
  return status;
}

}  // namespace matserve::server
