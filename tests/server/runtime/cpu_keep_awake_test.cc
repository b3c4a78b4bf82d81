// The CPU keep-awake spinners: one per allowed CPU at idle priority, parked until a call arrives,
// spinning within the window after it, parked again after, resting while calls overlap or a heavy
// call runs, and stopped promptly.
#include "server/runtime/cpu_keep_awake.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <functional>
#include <thread>

namespace matserve::server {
namespace {

// Polls `done` for up to `limit`: the spinners run on their own schedule, and at idle priority on
// a loaded machine (CI: 2 cores, tests in parallel) they may wait seconds for a CPU.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

int allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  return CPU_COUNT(&set);
}

TEST(CpuKeepAwakeTest, RefusesAnEmptyWindowOrCallLimit) {
  EXPECT_EQ(CpuKeepAwake::start(absl::ZeroDuration(), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuKeepAwake::start(absl::Milliseconds(10), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuKeepAwakeTest, OneIdlePrioritySpinnerPerCpuParkedUntilTheFirstCall) {
  absl::StatusOr<std::unique_ptr<CpuKeepAwake>> k = CpuKeepAwake::start(absl::Milliseconds(50), 2);
  ASSERT_TRUE(k.ok()) << k.status();
  const CpuKeepAwake::Stats s = (*k)->stats();
  EXPECT_EQ(s.threads, allowed_cpus());
  EXPECT_EQ(s.idle_priority, s.threads);  // lowering one's own priority is always allowed
  EXPECT_TRUE(
      eventually([&] { return (*k)->stats().parked == s.threads; }, std::chrono::seconds(20)));
  EXPECT_EQ((*k)->stats().spinning, 0);
  EXPECT_EQ((*k)->stats().wakes, 0);
}

TEST(CpuKeepAwakeTest, SpinsWithinTheWindowAndParksAfterIt) {
  absl::StatusOr<std::unique_ptr<CpuKeepAwake>> k = CpuKeepAwake::start(absl::Milliseconds(100), 2);
  ASSERT_TRUE(k.ok()) << k.status();
  const int threads = (*k)->stats().threads;
  ASSERT_TRUE(
      eventually([&] { return (*k)->stats().parked == threads; }, std::chrono::seconds(20)));
  for (int round = 0; round < 2; ++round) {
    // Keep the window open while the spinners get going (on a busy machine an idle-priority
    // thread may wait a while for its CPU).
    EXPECT_TRUE(eventually(
        [&] {
          (*k)->call_started();
          (*k)->call_finished();
          return (*k)->stats().spinning == threads;
        },
        std::chrono::seconds(20)))
        << "round " << round << ": " << (*k)->stats().spinning << " of " << threads;
    EXPECT_TRUE(
        eventually([&] { return (*k)->stats().parked == threads; }, std::chrono::seconds(20)))
        << "round " << round << ": parked " << (*k)->stats().parked << " of " << threads;
    EXPECT_EQ((*k)->stats().spinning, 0);
  }
  // Each spinner was woken from parking once per round.
  EXPECT_EQ((*k)->stats().wakes, 2 * threads);
}

TEST(CpuKeepAwakeTest, RestsWhileCallsOverlapAndResumesAfterTheHold) {
  absl::StatusOr<std::unique_ptr<CpuKeepAwake>> k = CpuKeepAwake::start(absl::Seconds(60), 1);
  ASSERT_TRUE(k.ok()) << k.status();
  const int threads = (*k)->stats().threads;
  (*k)->call_started();
  EXPECT_TRUE(
      eventually([&] { return (*k)->stats().spinning == threads; }, std::chrono::seconds(20)));
  (*k)->call_started();  // two in flight, over the limit of one: rest, window or not
  EXPECT_TRUE(
      eventually([&] { return (*k)->stats().parked == threads; }, std::chrono::seconds(20)));
  EXPECT_EQ((*k)->stats().calls_in_flight, 2);
  (*k)->call_finished();  // back to the limit: spin again once the hold (20 ms) is over
  EXPECT_TRUE(
      eventually([&] { return (*k)->stats().spinning == threads; }, std::chrono::seconds(20)));
  (*k)->call_finished();
  EXPECT_EQ((*k)->stats().calls_in_flight, 0);
}

TEST(CpuKeepAwakeTest, RestsDuringAHeavyCall) {
  absl::StatusOr<std::unique_ptr<CpuKeepAwake>> k = CpuKeepAwake::start(absl::Seconds(60), 4);
  ASSERT_TRUE(k.ok()) << k.status();
  const int threads = (*k)->stats().threads;
  (*k)->call_started();
  EXPECT_TRUE(
      eventually([&] { return (*k)->stats().spinning == threads; }, std::chrono::seconds(20)));
  (*k)->call_started(/*heavy=*/true);  // within the call limit, but heavy
  EXPECT_TRUE(
      eventually([&] { return (*k)->stats().parked == threads; }, std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // longer than the hold
  EXPECT_EQ((*k)->stats().parked, threads) << "resumed while the heavy call runs";
  (*k)->call_finished(/*heavy=*/true);
  EXPECT_TRUE(
      eventually([&] { return (*k)->stats().spinning == threads; }, std::chrono::seconds(20)));
  (*k)->call_finished();
}

TEST(CpuKeepAwakeTest, StopsPromptlyWhileSpinning) {
  absl::StatusOr<std::unique_ptr<CpuKeepAwake>> k = CpuKeepAwake::start(absl::Seconds(60), 2);
  ASSERT_TRUE(k.ok()) << k.status();
  (*k)->call_started();
  ASSERT_TRUE(eventually([&] { return (*k)->stats().spinning > 0; }, std::chrono::seconds(20)));
  const auto t0 = std::chrono::steady_clock::now();
  k->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::seconds(10));  // well inside the 60 s window
}

}  // namespace
}  // namespace matserve::server
