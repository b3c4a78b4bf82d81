// A counting semaphore with deadlines: at most N operations run at once on a device; the others
// wait (that wait is the reply's queue time) until a slot frees or their deadline passes.
#pragma once

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace matserve::server {

class ConcurrencyLimiter {
 public:
  explicit ConcurrencyLimiter(int slots) : free_(slots) {}

  // OK once a slot is held; DEADLINE_EXCEEDED if none freed before `deadline`.
  absl::Status acquire(absl::Time deadline);
  void release();
  int in_use() const;

 private:
  bool has_slot() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return free_ > 0; }

  mutable absl::Mutex mu_;
  int free_ ABSL_GUARDED_BY(mu_);
  int used_ ABSL_GUARDED_BY(mu_) = 0;
};

// Holds one slot for a scope.
class SlotGuard {
 public:
  explicit SlotGuard(ConcurrencyLimiter& l) : limiter_(l) {}
  SlotGuard(const SlotGuard&) = delete;
  SlotGuard& operator=(const SlotGuard&) = delete;
  ~SlotGuard() { limiter_.release(); }

 private:
  ConcurrencyLimiter& limiter_;
};

}  // namespace matserve::server
