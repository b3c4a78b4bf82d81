// Host byte budget: see host_budget.h.
#include "server/runtime/host_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace matserve::server {
namespace {

// How often a waiting request re-checks its cancellation (its deadline ends the wait exactly).
constexpr absl::Duration kPoll = absl::Milliseconds(5);

}  // namespace

HostBudget::Lease& HostBudget::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    reset();
    budget_ = std::exchange(o.budget_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void HostBudget::Lease::reset() {
  if (budget_ != nullptr) budget_->give_back(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

void HostBudget::set_limit(std::int64_t bytes) {
  absl::MutexLock lock(&mu_);
  limit_ = bytes;
}

std::int64_t HostBudget::limit() const {
  absl::MutexLock lock(&mu_);
  return limit_;
}

std::int64_t HostBudget::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

absl::StatusOr<HostBudget::Lease> HostBudget::acquire(std::int64_t bytes, const Waiter& waiter) {
  if (bytes <= 0) return Lease();
  absl::MutexLock lock(&mu_);
  if (bytes > limit_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "needs ", bytes, " bytes of host memory, above the limit of ", limit_, " (", what_, ")"));
  }
  const auto fits = [this, bytes]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_use_ + bytes <= limit_; };
  while (!fits()) {
    const absl::Time now = absl::Now();
    if (now >= waiter.deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the deadline passed while waiting for ", bytes, " bytes of host memory (", what_, ")"));
    }
    if (waiter.cancelled && waiter.cancelled()) {
      return absl::CancelledError(absl::StrCat("cancelled by the client while waiting for ", bytes,
                                               " bytes of host memory (", what_, ")"));
    }
    mu_.AwaitWithDeadline(absl::Condition(&fits), std::min(waiter.deadline, now + kPoll));
  }
  in_use_ += bytes;
  return Lease(this, bytes);
}

void HostBudget::give_back(std::int64_t bytes) {
  absl::MutexLock lock(&mu_);
  in_use_ -= bytes;
}

}  // namespace matserve::server
