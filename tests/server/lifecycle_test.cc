// ShutdownSignals: a SIGTERM or SIGINT that lands on a thread started before it (as a BLAS
// library's workers are, when it is loaded) reaches wait() instead of killing the process.
#include "server/lifecycle.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <string>
#include <thread>

namespace matserve::server {
namespace {

TEST(ShutdownSignalsTest, ASignalOnAThreadStartedBeforeReachesWait) {
  for (const int sig : {SIGTERM, SIGINT}) {
    // A thread with the signals unblocked, as one started before ShutdownSignals has them.
    std::atomic<bool> go{false};
    std::thread early([&go, sig] {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, sig);
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);  // as in a thread started before main
      while (!go.load()) std::this_thread::yield();
      pthread_kill(pthread_self(), sig);  // delivered to this thread, which does not block it
    });
    const ShutdownSignals signals;
    go.store(true);
    const std::string name = signals.wait();  // without the forwarding the process dies here
    early.join();
    EXPECT_EQ(name, sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
}

}  // namespace
}  // namespace matserve::server
