// CallStarters: every posted task runs once, on the starter threads and side by side (a task that
// waits for a later one finishes only if both run at once), inline when there are no threads, and
// the tasks still queued run before the destructor returns; no thread is made before the first
// task (a client that never stripes keeps none).
#include "client/cpp/call_starters.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace matserve::client {
namespace {

TEST(CallStarters, EveryTaskRunsOnceOffTheCallersThread) {
  std::atomic<int> runs{0};
  absl::Mutex mu;
  std::set<std::thread::id> where;
  {
    CallStarters starters(4);
    for (int i = 0; i < 200; ++i) {
      starters.post([&] {
        runs.fetch_add(1);
        absl::MutexLock lock(&mu);
        where.insert(std::this_thread::get_id());
      });
    }
  }  // the destructor runs what is still queued
  EXPECT_EQ(runs.load(), 200);
  EXPECT_FALSE(where.contains(std::this_thread::get_id()));
  EXPECT_LE(where.size(), 4u);
}

TEST(CallStarters, TasksRunSideBySide) {
  CallStarters starters(2);
  absl::Notification second_ran;
  absl::Notification first_saw_it;
  starters.post([&] {
    if (second_ran.WaitForNotificationWithTimeout(absl::Seconds(10))) first_saw_it.Notify();
  });
  starters.post([&] { second_ran.Notify(); });
  EXPECT_TRUE(first_saw_it.WaitForNotificationWithTimeout(absl::Seconds(20)));
}

// The process's threads now (Linux: one entry each in /proc/self/task).
std::ptrdiff_t threads_now() {
  const std::filesystem::directory_iterator tasks("/proc/self/task");
  return std::distance(begin(tasks), end(tasks));
}

// Checked in a child process that runs only this test (gtest's "threadsafe" style re-executes the
// binary; a plain fork could inherit a lock some other test's gRPC thread held), so no other
// test's threads come or go while it counts.
TEST(CallStarters, ThreadsAreMadeByTheFirstTask) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::ptrdiff_t before = threads_now();
        CallStarters starters(6);
        const bool none_yet = threads_now() == before;
        absl::Notification ran;
        starters.post([&] { ran.Notify(); });
        const bool ran_in_time = ran.WaitForNotificationWithTimeout(absl::Seconds(20));
        std::_Exit(none_yet && ran_in_time && threads_now() == before + 6 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CallStarters, WithoutThreadsATaskRunsOnTheCallersThread) {
  CallStarters starters(0);
  std::thread::id ran_on;
  starters.post([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

}  // namespace
}  // namespace matserve::client
