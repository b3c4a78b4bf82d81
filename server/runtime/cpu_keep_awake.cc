// CPU keep-awake spinners: see cpu_keep_awake.h.
#include "server/runtime/cpu_keep_awake.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <limits>

#include "absl/status/status.h"

namespace matserve::server {
namespace {

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Clock reads are cheap (vDSO) but not free: the spinning loop looks at the clock every this many
// turns (well under a microsecond apart).
constexpr int kTurnsPerClockRead = 256;

// Calls overlap (more in flight than the limit) = load, for this long after the last overlap:
// handlers are short, so under concurrent clients the count in flight dips below the limit
// between calls all the time; the hold keeps the spinners out of the way for the whole burst.
constexpr std::int64_t kLoadHoldNs = 20'000'000;

// How long a spinner rests under load before it looks again: 16 spinners looking 200 times a
// second cost nothing measurable.
constexpr std::chrono::milliseconds kLoadPause{5};

// The spin-wait hint of the CPU, where there is one.
inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

CpuKeepAwake::CpuKeepAwake(const Options& options)
    : max_calls_in_flight_(options.max_calls_in_flight),
      window_ns_(absl::ToInt64Nanoseconds(options.window)),
      clock_ns_(options.clock_ns != nullptr ? options.clock_ns : &steady_now_ns),
      // Parked until the first activity: no spinning right after start.
      last_activity_ns_(std::numeric_limits<std::int64_t>::min() / 2) {}

std::int64_t CpuKeepAwake::now_ns() const {
  return clock_ns_();
}

absl::StatusOr<std::unique_ptr<CpuKeepAwake>> CpuKeepAwake::start(const Options& options) {
  if (options.window <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("keep_cpus_awake: the window must be positive");
  }
  if (options.max_calls_in_flight < 1) {
    return absl::InvalidArgumentError("keep_cpus_awake: max_calls_in_flight must be >= 1");
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return absl::InternalError("keep_cpus_awake: sched_getaffinity failed");
  }
  std::unique_ptr<CpuKeepAwake> k(  // NOLINT: private constructor
      new CpuKeepAwake(options));
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    std::thread& t = k->threads_.emplace_back([p = k.get()] { p->spin(); });
    // Pinned, named and at idle priority from here, not from the thread itself: an idle-priority
    // thread on a busy machine may wait long for its first turn, and start() must not wait for
    // it. Until its first turn it runs nothing: it counts as parked. Best effort each.
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(t.native_handle(), sizeof(one), &one);
    pthread_setname_np(t.native_handle(), "keep-awake");  // what top -H and ps show
    // Idle priority: the scheduler runs the thread only when its CPU has nothing else to do, and
    // a thread that wakes there preempts it at once.
    sched_param param{};
    if (options.idle_priority &&
        pthread_setschedparam(t.native_handle(), SCHED_IDLE, &param) == 0) {
      ++k->idle_priority_;
    }
  }
  return k;
}

CpuKeepAwake::~CpuKeepAwake() {
  stopping_.store(true);
  wake_parked();
  for (std::thread& t : threads_) t.join();
}

bool CpuKeepAwake::in_window() const {
  return now_ns() - last_activity_ns_.load() < window_ns_;  // ordered: see call_started()
}

bool CpuKeepAwake::under_load() const {
  return heavy_in_flight_.load(std::memory_order_relaxed) > 0 ||
         now_ns() - last_overload_ns_.load(std::memory_order_relaxed) < kLoadHoldNs;
}

void CpuKeepAwake::wake_parked() {
  wake_epoch_.fetch_add(1);
  wake_epoch_.notify_all();
}

void CpuKeepAwake::call_started(bool heavy) {
  const std::int64_t now = now_ns();
  last_activity_ns_.store(now);
  const int in_flight = calls_in_flight_.fetch_add(1) + 1;
  if (heavy) heavy_in_flight_.fetch_add(1, std::memory_order_relaxed);
  if (heavy || in_flight > max_calls_in_flight_) {
    last_overload_ns_.store(now, std::memory_order_relaxed);
    return;  // the spinners would only rest
  }
  // A spinner about to wait counts itself in waiting_, reads the epoch, then re-checks the
  // window (all sequentially consistent): it either sees this call, or is seen here and finds
  // the epoch changed (its wait returns at once) or is woken by the notify.
  if (waiting_.load() > 0) wake_parked();
}

void CpuKeepAwake::call_finished(bool heavy) {
  // No wake-up here: spinners resting under load look again on their own (kLoadPause); waking
  // them whenever the load dipped cost a futex storm per dip (measured: worse than resting).
  const std::int64_t now = now_ns();
  last_activity_ns_.store(now);
  if (heavy) {
    last_overload_ns_.store(now, std::memory_order_relaxed);
    heavy_in_flight_.fetch_sub(1, std::memory_order_relaxed);
  }
  calls_in_flight_.fetch_sub(1);
}

void CpuKeepAwake::spin() {
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (!in_window()) {
      waiting_.fetch_add(1);
      bool waited = false;
      for (std::uint32_t epoch = wake_epoch_.load(); !stopping_.load() && !in_window();
           epoch = wake_epoch_.load()) {
        wake_epoch_.wait(epoch);
        waited = true;
      }
      waiting_.fetch_sub(1);
      if (waited && !stopping_.load()) wakes_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (under_load()) {
      std::this_thread::sleep_for(kLoadPause);
      continue;
    }
    spinning_.fetch_add(1, std::memory_order_relaxed);
    // With the PAUSE hint: it leaves an SMT sibling the core's execution units and saves power.
    // Measured on H100 KVM guests, the latency gain is the same with it as without it (the
    // hypervisor's pause-loop exiting did not deschedule the spinning vCPUs).
    int turns = 0;
    while (!stopping_.load(std::memory_order_relaxed)) {
      relax();
      if (++turns == kTurnsPerClockRead) {
        turns = 0;
        if (!in_window() || under_load()) break;
      }
    }
    spinning_.fetch_sub(1, std::memory_order_relaxed);
  }
}

CpuKeepAwake::Stats CpuKeepAwake::stats() const {
  const int threads = static_cast<int>(threads_.size());
  const int spinning = spinning_.load();
  return Stats{.threads = threads,
               .idle_priority = idle_priority_,
               .spinning = spinning,
               .parked = threads - spinning,
               .calls_in_flight = calls_in_flight_.load(),
               .wakes = wakes_.load()};
}

}  // namespace matserve::server
