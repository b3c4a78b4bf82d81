// The SIGBUS guard of shared-memory mappings: see shm_fault_guard.h. The table is lock-free (the
// handler may run in any thread, at any point): a slot is claimed by compare-and-swap of its
// `state`, published with its bounds before it is marked live, and read by the handler only while
// live. One thread at a time replaces a slot's pages (`busy`); another that faults meanwhile
// returns at once and, its access faulting again, finds the pages replaced.
#include "server/runtime/shm_fault_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace matserve::server::shm_fault_guard {
namespace {

enum : int { kFree = 0, kClaimed = 1, kLive = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  // Pages from `replaced` to `end` are private zero pages already (== end while none are).
  std::atomic<std::uintptr_t> replaced{0};
  std::atomic<bool> busy{false};
  std::atomic<bool> faulted{false};
};

// The one table (see the file comment of shm_fault_guard.h).
Slot g_slots[kSlots];
struct sigaction g_previous;
std::atomic<std::uintptr_t> g_page{4096};  // set by install(): sysconf is no signal-safe call

// Maps private zero pages over [from, to); MAP_NORESERVE so that no commit charge can refuse a
// large range. True when it worked.
bool replace(std::uintptr_t from, std::uintptr_t to) {
  void* at = reinterpret_cast<void*>(from);  // NOLINT(performance-no-int-to-ptr)
  return mmap(at, to - from, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != MAP_FAILED;
}

// The fault at `addr` inside slot `s`: replaces from its page to the range's end in one mapping
// (or, should that mmap fail, the whole range, which needs no split). Returning re-runs the
// access: on a zero page, or (when another thread is replacing, or the mmap failed) into this
// handler again.
void on_guarded_fault(Slot& s, std::uintptr_t addr) {
  s.faulted.store(true, std::memory_order_release);
  if (s.busy.exchange(true, std::memory_order_acquire)) return;
  const int saved_errno = errno;  // the interrupted code's, whatever mmap does to it
  const std::uintptr_t begin = s.begin.load(std::memory_order_relaxed);
  const std::uintptr_t end = s.end.load(std::memory_order_relaxed);
  const std::uintptr_t page = std::max(begin, addr & ~(g_page.load(std::memory_order_relaxed) - 1));
  if (page < s.replaced.load(std::memory_order_relaxed)) {
    if (replace(page, end)) {
      s.replaced.store(page, std::memory_order_relaxed);
    } else if (replace(begin, end)) {
      s.replaced.store(begin, std::memory_order_relaxed);
    }
  }
  errno = saved_errno;
  s.busy.store(false, std::memory_order_release);
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    if (s.state.load(std::memory_order_acquire) != kLive) continue;
    if (addr < s.begin.load(std::memory_order_relaxed) ||
        addr >= s.end.load(std::memory_order_relaxed)) {
      continue;
    }
    return on_guarded_fault(s, addr);  // never the default action for a guarded address
  }
  // Not ours: what would have happened without the guard.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  signal(SIGBUS, SIG_DFL);  // returning re-runs the access, which now takes the default action
}

}  // namespace

absl::Status install() {
  static std::once_flag once;
  static int error = 0;
  std::call_once(once, [] {
    g_page.store(static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE)));
    struct sigaction action = {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &g_previous) != 0) error = errno;
  });
  if (error != 0) return absl::InternalError(absl::StrCat("sigaction(SIGBUS): errno ", error));
  return absl::OkStatus();
}

absl::StatusOr<Range> Range::guard(const void* begin, std::size_t bytes) {
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kClaimed)) continue;
    const auto b = reinterpret_cast<std::uintptr_t>(begin);
    g_slots[i].begin.store(b, std::memory_order_relaxed);
    g_slots[i].end.store(b + bytes, std::memory_order_relaxed);
    g_slots[i].replaced.store(b + bytes, std::memory_order_relaxed);
    g_slots[i].busy.store(false, std::memory_order_relaxed);
    g_slots[i].faulted.store(false, std::memory_order_relaxed);
    g_slots[i].state.store(kLive, std::memory_order_release);
    return Range(i);
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("shared memory: ", kSlots, " regions are registered already (server-wide)"));
}

Range& Range::operator=(Range&& o) noexcept {
  if (this != &o) {
    if (slot_ >= 0) g_slots[slot_].state.store(kFree, std::memory_order_release);
    slot_ = o.slot_;
    o.slot_ = -1;
  }
  return *this;
}

Range::~Range() {
  if (slot_ >= 0) g_slots[slot_].state.store(kFree, std::memory_order_release);
}

bool Range::faulted() const {
  return slot_ >= 0 && g_slots[slot_].faulted.load(std::memory_order_acquire);
}

}  // namespace matserve::server::shm_fault_guard
