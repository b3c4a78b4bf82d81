// The execution plan: the steps run in their order with their trace marks; a failing step ends
// the run with its status, the later steps not run, and abandon() called while the admission still
// holds the memory; a refused pick or admission abandons nothing; blocks are found by the ids the
// plan gave, and a kept block outlives the admission; blocks an operation can do without are
// admitted when there is room, absent otherwise, and one given back is free for others at once.
#include "server/runtime/execution_plan.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace matserve::server {
namespace {

RawAllocator heap() {
  return RawAllocator{.name = "test memory",
                      .allocate = [](std::size_t b) { return std::malloc(b); },
                      .release = [](void* p) { std::free(p); }};
}

// Records every step it is asked to run; fails the one named `fail_at`.
class RecordingOperation {
 public:
  RecordingOperation(DeviceScheduler& scheduler, std::string fail_at)
      : scheduler_(scheduler), fail_at_(std::move(fail_at)) {}

  absl::StatusOr<DeviceScheduler*> pick() {
    if (absl::Status s = step("pick"); !s.ok()) return s;
    return &scheduler_;
  }
  void plan_memory(BlockPlan& plan) {
    calls.push_back("plan_memory");
    scratch = plan.add(bytes);
    absent = plan.add_if(false, bytes);
    kept = plan.add_if(true, bytes, /*long_lived=*/true);
  }
  absl::Status choose(AdmittedMemory& memory) {
    scratch_data = memory.data(scratch);
    kept_data = memory.data(*kept);
    return step("choose");
  }
  absl::Status stage_in() { return step("stage_in"); }
  absl::Status launch(Outcome& /*outcome*/) { return step("launch"); }
  absl::Status wait_kernel() { return step("wait_kernel"); }
  absl::Status stage_out(Outcome& /*outcome*/) { return step("stage_out"); }
  void record(Outcome& outcome) {
    calls.push_back("record");
    outcome.variant = "recorded";
  }
  void keep(AdmittedMemory& memory, Outcome& /*outcome*/) {
    calls.push_back("keep");
    kept_block = memory.take(*kept);
  }
  void abandon() {
    calls.push_back("abandon");
    in_use_at_abandon = scheduler_.pool().stats().in_use_bytes;
  }

  std::size_t bytes = 1024;
  std::vector<std::string> calls;
  BlockId scratch;
  std::optional<BlockId> absent;
  std::optional<BlockId> kept;
  void* scratch_data = nullptr;
  void* kept_data = nullptr;
  MemoryPool::Block kept_block;
  std::int64_t in_use_at_abandon = -1;

 private:
  absl::Status step(const char* name) {
    calls.emplace_back(name);
    if (fail_at_ == name) return absl::InternalError(std::string(name) + " failed");
    return absl::OkStatus();
  }

  DeviceScheduler& scheduler_;
  std::string fail_at_;
};

static_assert(Operation<RecordingOperation>);

std::vector<std::string> stage_names(const Outcome& outcome) {
  std::vector<std::string> names;
  for (const auto& [name, us] : outcome.marks.stages()) names.emplace_back(name);
  return names;
}

TEST(ExecutionPlan, RunsEveryStepInOrderWithItsMark) {
  MemoryPool pool(heap(), 1 << 20);
  DeviceScheduler scheduler("dev", 1, 4, pool);
  RecordingOperation op(scheduler, "");
  Outcome outcome;
  outcome.marks.start("test");
  ASSERT_TRUE(execute(op, Waiter{}, outcome).ok());
  EXPECT_EQ(op.calls,
            (std::vector<std::string>{"pick", "plan_memory", "choose", "stage_in", "launch",
                                      "wait_kernel", "stage_out", "record", "keep"}));
  EXPECT_EQ(stage_names(outcome),
            (std::vector<std::string>{"pick", "admit", "choose", "stage_in", "launch",
                                      "kernel_wait", "stage_out", "outcome"}));
  EXPECT_EQ(outcome.variant, "recorded");
  EXPECT_GE(outcome.times.queue_us, 0.0);
}

TEST(ExecutionPlan, BlocksAreFoundByTheirIdsAndAKeptOneOutlivesTheAdmission) {
  MemoryPool pool(heap(), 1 << 20);
  DeviceScheduler scheduler("dev", 1, 4, pool);
  RecordingOperation op(scheduler, "");
  Outcome outcome;
  ASSERT_TRUE(execute(op, Waiter{}, outcome).ok());
  EXPECT_FALSE(op.absent.has_value());
  ASSERT_NE(op.scratch_data, nullptr);
  ASSERT_NE(op.kept_data, nullptr);
  EXPECT_NE(op.scratch_data, op.kept_data);
  EXPECT_EQ(op.kept_block.data(), op.kept_data);
  std::memset(op.kept_block.data(), 7, op.bytes);  // still ours after the admission ended
  EXPECT_EQ(pool.stats().long_lived_bytes, pool.stats().in_use_bytes);
  EXPECT_GT(pool.stats().in_use_bytes, 0);
}

// Each step that can fail, the steps after it never run, and abandon() runs while the
// operation's memory is still admitted.
TEST(ExecutionPlan, AFailingStepStopsTheRunAndAbandonsBeforeTheMemoryGoesBack) {
  const std::vector<std::string> order = {"choose", "stage_in", "launch", "wait_kernel",
                                          "stage_out"};
  for (std::size_t i = 0; i < order.size(); ++i) {
    SCOPED_TRACE(order[i]);
    MemoryPool pool(heap(), 1 << 20);
    DeviceScheduler scheduler("dev", 1, 4, pool);
    RecordingOperation op(scheduler, order[i]);
    Outcome outcome;
    const absl::Status s = execute(op, Waiter{}, outcome);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
    EXPECT_EQ(s.message(), order[i] + " failed");
    std::vector<std::string> expected = {"pick", "plan_memory"};
    expected.insert(expected.end(), order.begin(), order.begin() + static_cast<long>(i) + 1);
    expected.push_back("abandon");
    EXPECT_EQ(op.calls, expected);
    EXPECT_GE(op.in_use_at_abandon, static_cast<std::int64_t>(2 * op.bytes));
    EXPECT_EQ(pool.stats().in_use_bytes, 0);  // every block back, the kept one included
    EXPECT_EQ(scheduler.stats().running, 0);
  }
}

TEST(ExecutionPlan, ARefusedPickAdmitsAndAbandonsNothing) {
  MemoryPool pool(heap(), 1 << 20);
  DeviceScheduler scheduler("dev", 1, 4, pool);
  RecordingOperation op(scheduler, "pick");
  Outcome outcome;
  EXPECT_EQ(execute(op, Waiter{}, outcome).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(op.calls, (std::vector<std::string>{"pick"}));
  EXPECT_EQ(scheduler.stats().admitted, 0);
}

TEST(ExecutionPlan, MemoryThatCanNeverFitIsRefusedBeforeAnyStepRuns) {
  MemoryPool pool(heap(), 1 << 20);
  DeviceScheduler scheduler("dev", 1, 4, pool);
  RecordingOperation op(scheduler, "");
  op.bytes = std::size_t{1} << 21;  // over the budget
  Outcome outcome;
  EXPECT_EQ(execute(op, Waiter{}, outcome).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(op.calls, (std::vector<std::string>{"pick", "plan_memory"}));
  EXPECT_EQ(pool.stats().in_use_bytes, 0);
}

// Declares a block it needs and one it can do without; gives the latter back when told to.
class IfRoomOperation {
 public:
  IfRoomOperation(DeviceScheduler& scheduler, std::size_t wanted, bool give_back)
      : scheduler_(scheduler), wanted_(wanted), give_back_(give_back) {}

  absl::StatusOr<DeviceScheduler*> pick() { return &scheduler_; }
  void plan_memory(BlockPlan& plan) {
    needed_ = plan.add(4096);
    not_declared_ = plan.add_if_room(false, wanted_);
    optional_ = plan.add_if_room(true, wanted_);
  }
  absl::Status choose(AdmittedMemory& memory) {
    had_optional = memory.has(*optional_);
    optional_data = memory.data(*optional_);
    had_needed = memory.has(needed_);
    if (give_back_ && had_optional) memory.release(*optional_);
    in_use_after_choose = scheduler_.pool().stats().in_use_bytes;
    return absl::OkStatus();
  }
  absl::Status stage_in() { return absl::OkStatus(); }
  absl::Status launch(Outcome& /*outcome*/) { return absl::OkStatus(); }
  absl::Status wait_kernel() { return absl::OkStatus(); }
  absl::Status stage_out(Outcome& /*outcome*/) { return absl::OkStatus(); }
  void record(Outcome& /*outcome*/) {}
  void keep(AdmittedMemory& /*memory*/, Outcome& /*outcome*/) {}
  void abandon() {}

  bool declared_absent() const { return !not_declared_.has_value(); }
  bool had_optional = false;
  bool had_needed = false;
  void* optional_data = nullptr;
  std::int64_t in_use_after_choose = -1;

 private:
  DeviceScheduler& scheduler_;
  std::size_t wanted_;
  bool give_back_;
  BlockId needed_;
  std::optional<BlockId> not_declared_;
  std::optional<BlockId> optional_;
};

static_assert(Operation<IfRoomOperation>);

TEST(ExecutionPlan, ABlockTheOperationCanDoWithoutIsAdmittedWhenThereIsRoom) {
  MemoryPool pool(heap(), 1 << 20);
  DeviceScheduler scheduler("dev", 1, 4, pool);
  IfRoomOperation op(scheduler, 512 << 10, /*give_back=*/false);
  Outcome outcome;
  ASSERT_TRUE(execute(op, Waiter{}, outcome).ok());
  EXPECT_TRUE(op.declared_absent());
  EXPECT_TRUE(op.had_needed);
  EXPECT_TRUE(op.had_optional);
  EXPECT_NE(op.optional_data, nullptr);
  EXPECT_EQ(op.in_use_after_choose, 4096 + (512 << 10));
}

// Over the budget on its own: not refused, not waited for; the operation runs without it.
TEST(ExecutionPlan, ABlockTheOperationCanDoWithoutIsAbsentWhenThereIsNoRoom) {
  MemoryPool pool(heap(), 1 << 20);
  DeviceScheduler scheduler("dev", 1, 4, pool);
  IfRoomOperation op(scheduler, 2 << 20, /*give_back=*/false);
  Outcome outcome;
  ASSERT_TRUE(execute(op, Waiter{absl::Now() + absl::Seconds(10), {}}, outcome).ok());
  EXPECT_TRUE(op.had_needed);
  EXPECT_FALSE(op.had_optional);
  EXPECT_EQ(op.optional_data, nullptr);
  EXPECT_EQ(op.in_use_after_choose, 4096);
}

TEST(ExecutionPlan, ABlockGivenBackInChooseIsBackInThePoolBeforeTheRunEnds) {
  MemoryPool pool(heap(), 1 << 20);
  DeviceScheduler scheduler("dev", 1, 4, pool);
  IfRoomOperation op(scheduler, 512 << 10, /*give_back=*/true);
  Outcome outcome;
  ASSERT_TRUE(execute(op, Waiter{}, outcome).ok());
  EXPECT_TRUE(op.had_optional);
  EXPECT_EQ(op.in_use_after_choose, 4096);
  EXPECT_EQ(pool.stats().in_use_bytes, 0);
}

}  // namespace
}  // namespace matserve::server
