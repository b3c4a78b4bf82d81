// The dynamic batcher with counting stand-ins for the backend: a lone request runs at once and
// alone; concurrent compatible requests share launches while one is running; requests of other
// shapes never join; a merged launch that fails re-runs its requests one by one, so only the one
// that cannot be served fails.
#include "server/runtime/dynamic_batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace matserve::server {
namespace {

GemmJob job_of(std::int64_t n, double alpha = 1.0) {
  GemmJob j;
  j.a.rows = j.a.cols = j.b.rows = j.b.cols = n;
  j.alpha = alpha;
  return j;
}

struct Counts {
  std::atomic<int> batches{0};
  std::atomic<int> singles{0};
  std::atomic<int> largest{0};
};

DynamicBatcher make(Counts& counts, int max_size, absl::Duration delay,
                    absl::Duration launch_time = absl::Milliseconds(20),
                    std::function<bool(const GemmBatchJob&)> fail_batch = {},
                    std::function<bool(const GemmJob&)> fail_one = {}) {
  return DynamicBatcher(
      BatchingOptions{.max_batch_size = max_size, .max_delay = delay},
      [&counts, launch_time, fail_batch](const GemmBatchJob& b, std::string_view, const Waiter&,
                                         Outcome& o) {
        ++counts.batches;
        int seen = counts.largest.load();
        while (seen < b.count && !counts.largest.compare_exchange_weak(seen, b.count)) {
        }
        absl::SleepFor(launch_time);
        if (fail_batch && fail_batch(b)) return absl::ResourceExhaustedError("batch");
        o.variant = "merged";
        return absl::OkStatus();
      },
      [&counts, launch_time, fail_one](const GemmJob& j, std::string_view, std::span<std::byte>,
                                       const Waiter&, Outcome& o) {
        ++counts.singles;
        absl::SleepFor(launch_time);
        if (fail_one && fail_one(j)) return absl::ResourceExhaustedError("this one");
        o.variant = "alone";
        return absl::OkStatus();
      });
}

TEST(DynamicBatcher, OffWhenMaxBatchSizeIsOneOrLess) {
  Counts counts;
  EXPECT_FALSE(make(counts, 0, absl::Milliseconds(1)).key(job_of(4), "auto").has_value());
  EXPECT_FALSE(make(counts, 1, absl::Milliseconds(1)).key(job_of(4), "auto").has_value());
  EXPECT_TRUE(make(counts, 2, absl::Milliseconds(1)).key(job_of(4), "auto").has_value());
}

TEST(DynamicBatcher, KeysSeparateShapesScalarsAndVariants) {
  Counts counts;
  DynamicBatcher b = make(counts, 8, absl::Milliseconds(1));
  EXPECT_EQ(b.key(job_of(4), "auto"), b.key(job_of(4), ""));
  EXPECT_NE(b.key(job_of(4), "auto"), b.key(job_of(5), "auto"));
  EXPECT_NE(b.key(job_of(4), "auto"), b.key(job_of(4, 2.0), "auto"));
  GemmJob fp8 = job_of(4);
  fp8.precision = kernels::Precision::kF8;
  ASSERT_TRUE(b.key(fp8, "auto").has_value());  // fp8 merges too, with fp8 requests only
  EXPECT_NE(b.key(fp8, "auto"), b.key(job_of(4), "auto"));
  EXPECT_FALSE(b.key(job_of(4), "no_such_variant").has_value());
}

TEST(DynamicBatcher, LoneRequestRunsAtOnceAndAlone) {
  Counts counts;
  // A long delay: a lone request must not wait for it.
  DynamicBatcher b = make(counts, 8, absl::Seconds(5), absl::ZeroDuration());
  const GemmJob j = job_of(4);
  for (int i = 0; i < 3; ++i) {
    Outcome o;
    const absl::Time start = absl::Now();
    ASSERT_TRUE(b.run(*b.key(j, "auto"), j, "auto", {}, Waiter{}, o).ok());
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
    EXPECT_EQ(o.merged_requests, 1);
    EXPECT_EQ(o.variant, "alone");
    EXPECT_LT(o.times.batch_wait_us, 1e5);
  }
  EXPECT_EQ(counts.batches.load(), 0);
  EXPECT_EQ(counts.singles.load(), 3);
}

// 24 concurrent requests, at most 2 launches running: most must share a launch, and every reply
// says how many requests its launch computed.
TEST(DynamicBatcher, ConcurrentRequestsShareLaunches) {
  Counts counts;
  DynamicBatcher b = make(counts, 8, absl::Seconds(2));
  const GemmJob j = job_of(16);
  constexpr int kRequests = 24;
  std::vector<Outcome> outcomes(kRequests);
  std::vector<absl::Status> statuses(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back(
        [&, i] { statuses[i] = b.run(*b.key(j, "auto"), j, "auto", {}, Waiter{}, outcomes[i]); });
  }
  for (std::thread& t : threads) t.join();
  int merged = 0;
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << statuses[i];
    EXPECT_GE(outcomes[i].merged_requests, 1);
    EXPECT_LE(outcomes[i].merged_requests, 8);
    if (outcomes[i].merged_requests > 1) {
      ++merged;
      EXPECT_EQ(outcomes[i].variant, "merged");
    }
  }
  EXPECT_GT(merged, kRequests / 2);
  EXPECT_GT(counts.largest.load(), 2);
  EXPECT_LE(counts.largest.load(), 8);
  // Fewer launches than requests.
  EXPECT_LT(counts.batches.load() + counts.singles.load(), kRequests);
}

// Requests of two shapes at once: every launch the batcher makes holds one shape only. The launch
// stand-ins look at each product's operands (a product of the other shape counts as a mix), and
// every launch waits until all requests have been made, so that the two launches of a shape that
// may run at once are both running while the later requests queue: those are then merged. Rounds
// repeat (a few at most) until one has merged requests, so the check is never vacuous.
TEST(DynamicBatcher, OtherShapesNeverJoin) {
  constexpr int kRequests = 12;
  std::atomic<int> mixed{0}, merged_launches{0}, wrong{0};
  for (int round = 0; round < 20 && merged_launches.load() == 0; ++round) {
    std::atomic<int> started{0};
    absl::Notification all_started;
    DynamicBatcher b(
        BatchingOptions{.max_batch_size = 8, .max_delay = absl::Seconds(5)},
        [&](const GemmBatchJob& batch, std::string_view, const Waiter&, Outcome& o) {
          all_started.WaitForNotification();
          ++merged_launches;
          for (std::int64_t i = 0; i < batch.count; ++i) {
            if (batch.a_of(i).rows != batch.shape.a.rows ||
                batch.b_of(i).cols != batch.shape.b.cols) {
              ++mixed;
            }
          }
          o.variant = "merged";
          return absl::OkStatus();
        },
        [&](const GemmJob&, std::string_view, std::span<std::byte>, const Waiter&, Outcome& o) {
          all_started.WaitForNotification();
          o.variant = "alone";
          return absl::OkStatus();
        });
    std::vector<std::thread> threads;
    for (int i = 0; i < kRequests; ++i) {
      threads.emplace_back([&, i] {
        const GemmJob j = job_of(i % 2 == 0 ? 8 : 9);
        Outcome o;
        if (++started == kRequests) all_started.Notify();
        if (!b.run(*b.key(j, "auto"), j, "auto", {}, Waiter{}, o).ok()) ++wrong;
        if (o.merged_requests > 1 && o.variant != "merged") ++wrong;
      });
    }
    for (std::thread& t : threads) t.join();
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(mixed.load(), 0) << "a launch held products of both shapes";
  EXPECT_GT(merged_launches.load(), 0) << "nothing was merged in 20 rounds: the test saw no batch";
}

TEST(DynamicBatcher, FailedMergedLaunchFailsOnlyTheRequestThatCannotBeServed) {
  Counts counts;
  // Every merged launch fails; alone, only the request with alpha 3 fails.
  DynamicBatcher b = make(
      counts, 8, absl::Seconds(2), absl::Milliseconds(20), [](const GemmBatchJob&) { return true; },
      [](const GemmJob& j) { return j.alpha == 3.0; });
  constexpr int kRequests = 12;
  std::vector<absl::Status> statuses(kRequests);
  std::vector<std::thread> threads;
  std::vector<GemmJob> jobs;
  for (int i = 0; i < kRequests; ++i) jobs.push_back(job_of(4, i == 5 ? 3.0 : 1.0));
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      Outcome o;
      // One key for all (the failing one is told apart by the stand-in, not by the batcher).
      statuses[i] = b.run(*b.key(jobs[0], "auto"), jobs[i], "auto", {}, Waiter{}, o);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    if (i == 5) {
      EXPECT_EQ(statuses[i].code(), absl::StatusCode::kResourceExhausted);
    } else {
      EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
    }
  }
  EXPECT_GT(counts.batches.load(), 0) << "no launch was merged: the fallback was not exercised";
}

}  // namespace
}  // namespace matserve::server
