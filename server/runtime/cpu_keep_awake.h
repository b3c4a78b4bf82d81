// Keeps the host's CPUs out of their idle state while requests are arriving, so that the wake-ups
// on a request's path (gRPC's poller reading the call, the handler's thread, the CUDA driver's
// waits) do not wait for a halted CPU. In a virtual machine a halted vCPU leaves the guest (a
// VM exit) and its next wake-up costs tens of microseconds; measured on H100 virtual machines
// (docs/benchmarks.md, "Latency of a small resident multiply"), a resident 256^3 multiply at
// concurrency 1 took 110-155 us end to end with this on and 148-246 us without, in the same
// rounds.
//
// One thread per CPU the process may run on, pinned there, at SCHED_IDLE: it runs only when
// nothing else wants that CPU; a woken thread finds the CPU running (a cheap in-guest switch)
// instead of halted. The spinners spin only within `window` of the last call and park (a futex
// wait) otherwise, so an idle server costs nothing. They also rest (5 ms at a time) for 20 ms
// after calls overlapped, more than `max_calls_in_flight` in flight at once, and while a heavy
// call runs (see call_started): with concurrent clients the CPUs rarely halt anyway, and busy
// idle-priority threads get in the scheduler's way (measured: with the spinners always on,
// resident 256^3 at concurrency 8 and 64 lost 23% and 39% of its rate; likely because a CPU
// running one never goes idle, so it neither pulls waiting threads over nor looks idle to the
// kernel's search for an idle CPU at wake-up).
// No lock is shared with the request threads: a spinner that held one and lost its CPU to real
// work would stall the request behind it (priority inversion).
// Off by default (the server's --keep_cpus_awake_ms): it trades CPU time and power for latency.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace matserve::server {

class CpuKeepAwake {
 public:
  struct Stats {
    int threads = 0;        // one per CPU in the process's affinity mask
    int idle_priority = 0;  // of those, how many run at SCHED_IDLE (all, unless refused)
    int spinning = 0;       // in their spin loop: keeping their CPU awake when they have it
    int parked = 0;         // the others: waiting for the next call, or resting under load
    int calls_in_flight = 0;
    std::int64_t wakes = 0;  // times the spinners were woken from parking
  };

  struct Options {
    absl::Duration window;        // > 0: how long after a call the spinners keep spinning
    int max_calls_in_flight = 1;  // >= 1: more at once than this, and the spinners rest
    bool idle_priority = true;    // SCHED_IDLE; false only in tests (see below)
    // The clock windows and holds are measured on, in nanoseconds; nullptr: steady_clock.
    // Tests pass a clock they move by hand, and run the spinners at normal priority, so that
    // what the spinners do depends only on the calls and the clock, never on whether a loaded
    // machine gives an idle-priority thread a CPU within some time.
    std::int64_t (*clock_ns)() = nullptr;
  };

  // Starts the spinners, parked until the first call; each is pinned, named and at its priority
  // before this returns (set from this thread, so start() never waits for a spinner to run).
  static absl::StatusOr<std::unique_ptr<CpuKeepAwake>> start(const Options& options);
  static absl::StatusOr<std::unique_ptr<CpuKeepAwake>> start(absl::Duration window,
                                                             int max_calls_in_flight) {
    return start(Options{.window = window, .max_calls_in_flight = max_calls_in_flight});
  }
  ~CpuKeepAwake();  // stops and joins every spinner
  CpuKeepAwake(const CpuKeepAwake&) = delete;
  CpuKeepAwake& operator=(const CpuKeepAwake&) = delete;

  // Calls whose request carries this many bytes or more count as heavy (below).
  static constexpr std::size_t kHeavyCallBytes = std::size_t{1} << 20;

  // A call started / finished: keep every CPU awake for the next `window`. A `heavy` call (one
  // that moves megabytes through the host) makes the spinners rest while it runs and for the
  // hold after: spinning buys such a call nothing, and with every CPU busy the host clocks the
  // CPU that copies lower (measured: server time of an inline 4096^3 multiply +30%). On the
  // request path: a clock read and a few atomic operations, and a futex wake when a call finds
  // the spinners parked (the first call after an idle window).
  void call_started(bool heavy = false);
  void call_finished(bool heavy = false);

  // call_started() now, call_finished() at the end of the scope; nothing without a keep-awake.
  class Call {
   public:
    Call(CpuKeepAwake* k, bool heavy) : k_(k), heavy_(heavy) {
      if (k_ != nullptr) k_->call_started(heavy_);
    }
    ~Call() {
      if (k_ != nullptr) k_->call_finished(heavy_);
    }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    CpuKeepAwake* k_;
    bool heavy_;
  };

  Stats stats() const;

 private:
  explicit CpuKeepAwake(const Options& options);
  std::int64_t now_ns() const;
  void spin();
  bool in_window() const;   // the last call started or finished within the window
  bool under_load() const;  // calls overlapped (over the limit), or a heavy one ran, lately
  void wake_parked();

  const int max_calls_in_flight_;
  const std::int64_t window_ns_;
  std::int64_t (*const clock_ns_)();
  std::atomic<std::int64_t> last_activity_ns_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint32_t> wake_epoch_{0};  // parked spinners wait for it to change
  std::atomic<int> calls_in_flight_{0};
  std::atomic<int> heavy_in_flight_{0};
  std::atomic<std::int64_t> last_overload_ns_{std::numeric_limits<std::int64_t>::min() / 2};
  std::atomic<int> waiting_{0};  // parked on wake_epoch_ (call_started wakes them)
  std::atomic<int> spinning_{0};
  int idle_priority_ = 0;  // set by start() before any caller sees the object
  std::atomic<std::int64_t> wakes_{0};
  std::vector<std::thread> threads_;
};

}  // namespace matserve::server
