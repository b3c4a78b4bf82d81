// Deadline-aware counting semaphore: see concurrency_limiter.h.
#include "server/runtime/concurrency_limiter.h"

namespace matserve::server {

absl::Status ConcurrencyLimiter::acquire(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithDeadline(absl::Condition(this, &ConcurrencyLimiter::has_slot), deadline)) {
    return absl::DeadlineExceededError(
        "deadline passed while queued for an execution slot on the device");
  }
  --free_;
  ++used_;
  return absl::OkStatus();
}

void ConcurrencyLimiter::release() {
  absl::MutexLock lock(&mu_);
  ++free_;
  --used_;
}

int ConcurrencyLimiter::in_use() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

}  // namespace matserve::server
