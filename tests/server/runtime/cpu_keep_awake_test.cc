// The CPU keep-awake spinners: one per allowed CPU at idle priority, parked until a call arrives,
// spinning within the window after it, parked again after, resting while calls overlap or a heavy
// call runs, and stopped promptly.
//
// What the spinners do depends on the calls and on the clock. These tests move a clock by hand
// and run the spinners at normal priority: an idle-priority thread on a loaded machine (CI runs
// tests in parallel on 2 cores) may not get a CPU for many seconds, and a test that waited for
// that would fail for nothing. So each wait below is for a state that the spinners must reach as
// soon as they run at all; the limit only turns a real bug into a failure instead of a hang.
#include "server/runtime/cpu_keep_awake.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace matserve::server {
namespace {

// The hand-moved clock, in nanoseconds. It starts far from zero, as steady_clock does.
std::atomic<std::int64_t> fake_now{std::int64_t{1} << 40};
std::int64_t fake_clock() {
  return fake_now.load();
}
void advance(std::chrono::milliseconds d) {
  fake_now.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

// Generous: reached in milliseconds by threads that get a CPU; the bound only avoids a hang.
constexpr std::chrono::seconds kBound{120};

bool eventually(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + kBound;
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

std::unique_ptr<CpuKeepAwake> start_on_fake_clock(std::chrono::milliseconds window, int max_calls) {
  absl::StatusOr<std::unique_ptr<CpuKeepAwake>> k =
      CpuKeepAwake::start({.window = absl::FromChrono(window),
                           .max_calls_in_flight = max_calls,
                           .idle_priority = false,
                           .clock_ns = &fake_clock});
  EXPECT_TRUE(k.ok()) << k.status();
  return k.ok() ? *std::move(k) : nullptr;
}

TEST(CpuKeepAwakeTest, RefusesAnEmptyWindowOrCallLimit) {
  EXPECT_EQ(CpuKeepAwake::start(absl::ZeroDuration(), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuKeepAwake::start(absl::Milliseconds(10), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuKeepAwakeTest, OneIdlePrioritySpinnerPerCpuParkedUntilTheFirstCall) {
  // The production set-up: SCHED_IDLE, the real clock. Set by start() itself, so nothing here
  // waits for a spinner to be scheduled.
  absl::StatusOr<std::unique_ptr<CpuKeepAwake>> k = CpuKeepAwake::start(absl::Milliseconds(50), 2);
  ASSERT_TRUE(k.ok()) << k.status();
  const CpuKeepAwake::Stats s = (*k)->stats();
  EXPECT_EQ(s.threads, allowed_cpus());
  EXPECT_EQ(s.idle_priority, s.threads);  // lowering a thread's priority is always allowed
  EXPECT_EQ(s.spinning, 0);
  EXPECT_EQ(s.parked, s.threads);
  EXPECT_EQ(s.wakes, 0);
}

TEST(CpuKeepAwakeTest, SpinsWithinTheWindowAndParksAfterIt) {
  std::unique_ptr<CpuKeepAwake> k = start_on_fake_clock(std::chrono::milliseconds(100), 2);
  ASSERT_NE(k, nullptr);
  const int threads = k->stats().threads;
  EXPECT_EQ(k->stats().idle_priority, 0);
  for (int round = 0; round < 2; ++round) {
    k->call_started();
    k->call_finished();
    EXPECT_TRUE(eventually([&] { return k->stats().spinning == threads; }))
        << "round " << round << ": " << k->stats().spinning << " of " << threads;
    advance(std::chrono::milliseconds(99));  // still inside the window
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(k->stats().spinning, threads) << "round " << round << ": parked in the window";
    advance(std::chrono::milliseconds(2));  // past it
    EXPECT_TRUE(eventually([&] { return k->stats().parked == threads; }))
        << "round " << round << ": parked " << k->stats().parked << " of " << threads;
  }
  // Each spinner waited for a call and was woken once per round (the first wait may begin
  // before or after the first call: a spinner that starts inside the window never waits).
  EXPECT_TRUE(eventually([&] { return k->stats().wakes >= threads; }));
  EXPECT_LE(k->stats().wakes, 2 * threads);
}

TEST(CpuKeepAwakeTest, RestsWhileCallsOverlapAndResumesAfterTheHold) {
  std::unique_ptr<CpuKeepAwake> k = start_on_fake_clock(std::chrono::seconds(60), 1);
  ASSERT_NE(k, nullptr);
  const int threads = k->stats().threads;
  k->call_started();
  EXPECT_TRUE(eventually([&] { return k->stats().spinning == threads; }));
  k->call_started();  // two in flight, over the limit of one: rest, window or not
  EXPECT_TRUE(eventually([&] { return k->stats().parked == threads; }));
  EXPECT_EQ(k->stats().calls_in_flight, 2);
  k->call_finished();  // back to the limit, but the hold (20 ms) is not over on this clock
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // several of their 5 ms rests
  EXPECT_EQ(k->stats().parked, threads) << "resumed inside the hold";
  advance(std::chrono::milliseconds(21));
  EXPECT_TRUE(eventually([&] { return k->stats().spinning == threads; }));
  k->call_finished();
  EXPECT_EQ(k->stats().calls_in_flight, 0);
}

TEST(CpuKeepAwakeTest, RestsDuringAHeavyCall) {
  std::unique_ptr<CpuKeepAwake> k = start_on_fake_clock(std::chrono::seconds(60), 4);
  ASSERT_NE(k, nullptr);
  const int threads = k->stats().threads;
  k->call_started();
  EXPECT_TRUE(eventually([&] { return k->stats().spinning == threads; }));
  k->call_started(/*heavy=*/true);  // within the call limit, but heavy
  EXPECT_TRUE(eventually([&] { return k->stats().parked == threads; }));
  advance(std::chrono::milliseconds(50));  // longer than the hold
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(k->stats().parked, threads) << "resumed while the heavy call runs";
  k->call_finished(/*heavy=*/true);
  advance(std::chrono::milliseconds(21));  // the hold after the heavy call
  EXPECT_TRUE(eventually([&] { return k->stats().spinning == threads; }));
  k->call_finished();
}

TEST(CpuKeepAwakeTest, StopsWhileSpinning) {
  // The window never closes on this clock: only stopping ends the spin loops, and the test would
  // hang (ctest's timeout) if it did not.
  std::unique_ptr<CpuKeepAwake> k = start_on_fake_clock(std::chrono::seconds(60), 2);
  ASSERT_NE(k, nullptr);
  k->call_started();
  ASSERT_TRUE(eventually([&] { return k->stats().spinning > 0; }));
  k.reset();
}

}  // namespace
}  // namespace matserve::server
