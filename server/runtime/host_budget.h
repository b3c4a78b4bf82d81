// A budget of host bytes that requests take for a while and give back: the float64 references of
// `verify` draw on it, so that all of them together never hold more than --max_verify_bytes. A
// request waits until its bytes fit (its deadline and cancellation honoured); one that could
// never fit is refused at once.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/runtime/device_scheduler.h"

namespace matserve::server {

class HostBudget {
 public:
  // Bytes held until destroyed. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept
        : budget_(std::exchange(o.budget_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }
    void reset();

   private:
    friend class HostBudget;
    Lease(HostBudget* budget, std::int64_t bytes) : budget_(budget), bytes_(bytes) {}
    HostBudget* budget_ = nullptr;
    std::int64_t bytes_ = 0;
  };

  // `what` names the budget in messages, e.g. "--max_verify_bytes".
  explicit HostBudget(const char* what,
                      std::int64_t limit = std::numeric_limits<std::int64_t>::max())
      : what_(what), limit_(limit) {}

  void set_limit(std::int64_t bytes);
  std::int64_t limit() const;
  std::int64_t in_use() const;

  // RESOURCE_EXHAUSTED when `bytes` exceeds the whole budget; DEADLINE_EXCEEDED / CANCELLED when
  // the waiter gives up first. Zero bytes never wait.
  absl::StatusOr<Lease> acquire(std::int64_t bytes, const Waiter& waiter);

 private:
  void give_back(std::int64_t bytes);

  const char* what_;
  mutable absl::Mutex mu_;
  std::int64_t limit_ ABSL_GUARDED_BY(mu_);
  std::int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace matserve::server
