// Admission: slots, bounded queue, memory that can never fit, waiting for memory, deadlines and
// cancellation releasing everything, blocks a request can do without taken only when there is room.
#include "server/runtime/device_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "absl/time/clock.h"

namespace matserve::server {
namespace {

RawAllocator heap() {
  return RawAllocator{.name = "test memory",
                      .allocate = [](std::size_t b) { return std::malloc(b); },
                      .release = [](void* p) { std::free(p); }};
}

Waiter within(absl::Duration d) {
  return Waiter{absl::Now() + d, {}};
}

// Waits (a minute at most) until `done` holds: a state the scheduler reports, never a guess at
// how long another thread takes to get there.
bool eventually(const std::function<bool()>& done) {
  const absl::Time give_up = absl::Now() + absl::Minutes(1);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(DeviceScheduler, AtMostSlotsRunAtOnce) {
  MemoryPool pool(heap(), 1 << 30);
  DeviceScheduler s("dev", 2, 16, pool);
  std::atomic<int> running{0};
  std::atomic<int> peak{0};
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto a = s.admit({}, within(absl::Minutes(1)));
      ASSERT_TRUE(a.ok());
      const int now = ++running;
      int p = peak.load();
      while (now > p && !peak.compare_exchange_weak(p, now)) {
      }
      // Hold the slot until a second one is taken too (or no one else is left to take it).
      EXPECT_TRUE(eventually([&] { return peak.load() >= 2 || finished.load() + 1 >= 8; }));
      --running;
      ++finished;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(peak.load(), 2);
  EXPECT_EQ(s.stats().admitted, 8);
  EXPECT_EQ(s.stats().running, 0);
}

TEST(DeviceScheduler, RequestThatCanNeverFitIsRefusedAtOnce) {
  MemoryPool pool(heap(), 1 << 20);
  DeviceScheduler s("dev", 2, 16, pool);
  const BlockSpec too_big[] = {{2 << 20, false}};
  auto a = s.admit(too_big, within(absl::Seconds(10)));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(a.status().message().find("the budget is 1048576"), absl::string_view::npos);
  EXPECT_EQ(s.stats().rejected_memory, 1);
}

TEST(DeviceScheduler, TryAdmitTakesAFreeSlotAndMemoryOrNothing) {
  MemoryPool pool(heap(), 4 << 20);
  DeviceScheduler s("dev", 1, 16, pool);
  const BlockSpec one_mib[] = {{1 << 20, false}};
  const BlockSpec five_mib[] = {{1 << 20, false}, {4 << 20, false}};
  // Memory that does not fit now: nothing taken, nothing counted as refused.
  EXPECT_FALSE(s.try_admit(five_mib).has_value());
  EXPECT_EQ(pool.stats().in_use_bytes, 0);
  EXPECT_EQ(s.stats().rejected_memory, 0);
  {
    std::optional<DeviceScheduler::Admission> held = s.try_admit(one_mib);
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(s.stats().running, 1);
    EXPECT_EQ(pool.stats().in_use_bytes, 1 << 20);
    // The only slot is taken: the next one does without.
    EXPECT_FALSE(s.try_admit(one_mib).has_value());
  }
  EXPECT_EQ(s.stats().running, 0);
  EXPECT_TRUE(s.try_admit(one_mib).has_value());
  EXPECT_EQ(s.stats().admitted, 2);
}

TEST(DeviceScheduler, ResidentMemoryCountsAgainstWhatIsLeft) {
  MemoryPool pool(heap(), 4 << 20);
  DeviceScheduler s("dev", 2, 16, pool);
  auto resident = pool.allocate(3 << 20, /*long_lived=*/true);
  ASSERT_TRUE(resident.ok());
  const BlockSpec two_mib[] = {{2 << 20, false}};
  auto a = s.admit(two_mib, within(absl::Seconds(10)));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("resident matrices hold 3145728"), absl::string_view::npos)
      << a.status();
}

TEST(DeviceScheduler, WaitsForMemoryWhileOthersProceed) {
  MemoryPool pool(heap(), 4 << 20);
  DeviceScheduler s("dev", 4, 16, pool);
  const BlockSpec three_mib[] = {{3 << 20, false}};
  auto first = s.admit(three_mib, within(absl::Seconds(10)));
  ASSERT_TRUE(first.ok());
  // A small request still runs while the big one holds memory.
  const BlockSpec small[] = {{512 << 10, false}};
  EXPECT_TRUE(s.admit(small, within(absl::Seconds(1))).ok());
  std::thread release([&] {
    EXPECT_TRUE(eventually([&] { return s.stats().queued == 1; }));  // the second waits
    auto gone = std::move(*first);
  });
  auto second = s.admit(three_mib, within(absl::Seconds(10)));  // waits for the first
  release.join();
  EXPECT_TRUE(second.ok()) << second.status();
}

TEST(DeviceScheduler, DeadlineWhileQueuedReleasesEverything) {
  MemoryPool pool(heap(), 1 << 30);
  DeviceScheduler s("dev", 1, 16, pool);
  auto holder = s.admit({}, within(absl::Seconds(1)));
  ASSERT_TRUE(holder.ok());
  const BlockSpec one_mib[] = {{1 << 20, false}};
  auto late = s.admit(one_mib, within(absl::Milliseconds(30)));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(pool.stats().in_use_bytes, 0);
  EXPECT_EQ(s.stats().queued, 0);
  EXPECT_EQ(s.stats().expired, 1);
}

TEST(DeviceScheduler, CancelledWhileQueued) {
  MemoryPool pool(heap(), 1 << 30);
  DeviceScheduler s("dev", 1, 16, pool);
  auto holder = s.admit({}, within(absl::Seconds(1)));
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    EXPECT_TRUE(eventually([&] { return s.stats().queued == 1; }));  // cancelled while queued
    cancel = true;
  });
  auto a = s.admit({}, Waiter{absl::InfiniteFuture(), [&] { return cancel.load(); }});
  canceller.join();
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kCancelled);
}

TEST(DeviceScheduler, FullQueueIsRefused) {
  MemoryPool pool(heap(), 1 << 30);
  DeviceScheduler s("dev", 1, 1, pool);
  auto holder = s.admit({}, within(absl::Minutes(1)));
  ASSERT_TRUE(holder.ok());
  std::thread waiting([&] { EXPECT_TRUE(s.admit({}, within(absl::Minutes(1))).ok()); });
  ASSERT_TRUE(eventually([&] { return s.stats().queued == 1; }));  // the queue's one place taken
  auto refused = s.admit({}, within(absl::Minutes(1)));
  { auto done = std::move(*holder); }  // the waiting one runs now
  waiting.join();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("queue full"), absl::string_view::npos);
}

// Budget 4 MiB, 3 MiB held elsewhere: 1 MiB of room.
TEST(DeviceScheduler, AnIfRoomBlockIsTakenWhenThereIsRoomAndLeftEmptyWithoutWaitingWhenNot) {
  MemoryPool pool(heap(), 4 << 20);
  DeviceScheduler s("dev", 2, 16, pool);
  auto other = pool.allocate(3 << 20);
  ASSERT_TRUE(other.ok());
  const BlockSpec specs[] = {{512 << 10, false, /*if_room=*/true},
                             {2 << 20, false, /*if_room=*/true},
                             {256 << 10, false, /*if_room=*/false}};
  // Nothing frees the other 3 MiB: an admission that waited for the 2 MiB block would expire.
  auto a = s.admit(specs, within(absl::Seconds(10)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_NE(a->block(0).data(), nullptr);  // room for it
  EXPECT_EQ(a->block(1).data(), nullptr);  // none: left empty
  EXPECT_NE(a->block(2).data(), nullptr);
  EXPECT_EQ(s.stats().queued, 0);
  EXPECT_EQ(s.stats().expired, 0);
}

// The blocks a request needs come first: an if-room block declared before them never takes the
// room they need (which would leave the request waiting for itself).
TEST(DeviceScheduler, IfRoomBlocksAreTakenAfterTheBlocksTheRequestNeeds) {
  MemoryPool pool(heap(), 4 << 20);
  DeviceScheduler s("dev", 2, 16, pool);
  const BlockSpec specs[] = {{2 << 20, false, /*if_room=*/true}, {3 << 20, false}};
  auto a = s.admit(specs, within(absl::Seconds(10)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->block(0).data(), nullptr);
  EXPECT_NE(a->block(1).data(), nullptr);
}

// Only the blocks a request needs count in the could-never-fit check.
TEST(DeviceScheduler, IfRoomBlocksDoNotCountInTheCouldNeverFitCheck) {
  MemoryPool pool(heap(), 1 << 20);
  DeviceScheduler s("dev", 2, 16, pool);
  const BlockSpec specs[] = {{512 << 10, false}, {2 << 20, true, /*if_room=*/true}};
  auto a = s.admit(specs, within(absl::Seconds(10)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->block(1).data(), nullptr);
  EXPECT_EQ(s.stats().rejected_memory, 0);
}

}  // namespace
}  // namespace matserve::server
