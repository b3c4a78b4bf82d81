// The host byte budget of verify's references: leases add up to at most the limit, a request
// over the whole limit is refused, a waiting one proceeds when bytes come back or gives up at
// its deadline or on cancellation.
#include "server/runtime/host_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"

namespace matserve::server {
namespace {

TEST(HostBudget, LeasesAddUpToTheLimit) {
  HostBudget budget("--test_bytes", 100);
  absl::StatusOr<HostBudget::Lease> a = budget.acquire(60, Waiter{});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(budget.in_use(), 60);
  EXPECT_TRUE(budget.acquire(0, Waiter{}).ok());  // nothing to take: never waits
  const absl::Status over = budget.acquire(101, Waiter{}).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("--test_bytes"), absl::string_view::npos) << over;
  a->reset();
  EXPECT_EQ(budget.in_use(), 0);
}

TEST(HostBudget, WaitsForBytesToComeBack) {
  HostBudget budget("--test_bytes", 100);
  absl::StatusOr<HostBudget::Lease> held = budget.acquire(80, Waiter{});
  ASSERT_TRUE(held.ok());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    absl::StatusOr<HostBudget::Lease> l = budget.acquire(50, Waiter{});
    got = l.ok();
  });
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(got.load());
  held->reset();
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(budget.in_use(), 0);
}

TEST(HostBudget, DeadlineAndCancellationEndTheWait) {
  HostBudget budget("--test_bytes", 100);
  absl::StatusOr<HostBudget::Lease> held = budget.acquire(100, Waiter{});
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(budget.acquire(1, Waiter{absl::Now() + absl::Milliseconds(20), {}}).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(budget.acquire(1, Waiter{absl::InfiniteFuture(), [] { return true; }}).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(budget.in_use(), 100);
}

}  // namespace
}  // namespace matserve::server
