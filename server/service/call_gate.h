// What every MatrixService call passes before its own work, apart from the handlers: refused
// while the server drains, the caller authenticated (auth.h) and its owner name known, the
// owner's resident-bytes quota reserved, and the handles and shared-memory regions it names
// resolved among that owner's only.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "server/runtime/resident_store.h"
#include "server/runtime/runtime.h"
#include "server/service/auth.h"
#include "server/service/limits.h"
#include "server/service/validation.h"

namespace grpc {
class ServerContext;
}  // namespace grpc

namespace matserve::server {

// FAILED_PRECONDITION naming `field`: shared memory is off (--shared_memory=false).
absl::Status shared_memory_off(const std::string& field);

class CallGate {
 public:
  // All three must outlive the gate.
  CallGate(Runtime& runtime, const ServiceLimits& limits, const Authenticator& auth)
      : runtime_(runtime), limits_(limits), auth_(auth) {}

  // From now on every call not yet past authorize() is refused with UNAVAILABLE.
  void begin_drain() { draining_.store(true); }

  // Who the caller is (the owner of the resident matrices it may see; "" when authentication is
  // off), or UNAVAILABLE while draining, UNAUTHENTICATED, PERMISSION_DENIED.
  absl::StatusOr<std::string> authorize(const grpc::ServerContext& context, Permission need,
                                        const char* rpc) const;
  // Multiply/Transpose: `compute`, plus `resident` when the request names handles or keeps its
  // result on the device.
  absl::StatusOr<std::string> authorize_compute(const grpc::ServerContext& context, bool resident,
                                                const char* rpc) const;
  // Reserves `more_bytes` of `owner`'s --max_resident_bytes_per_owner for a matrix the call will
  // publish (RESOURCE_EXHAUSTED when it would pass the limit); hold it until the call ends.
  absl::StatusOr<QuotaReservation> reserve_quota(const std::string& owner,
                                                 std::size_t more_bytes) const;
  // What `owner` may still take of --max_resident_bytes_per_owner (max: no limit).
  std::int64_t quota_room(const std::string& owner) const;
  // `owner`'s resident matrices by handle (NOT_FOUND for every other). Refers to `owner`, which
  // must outlive it.
  HandleResolver handles(const std::string& owner) const;
  // `owner`'s shared-memory regions (FAILED_PRECONDITION for all with --shared_memory=false).
  // Refers to `owner`, which must outlive it.
  RegionResolver regions(const std::string& owner) const;
  // The device index a new resident matrix goes to: that of `colocate_with` (a handle of
  // `owner`'s, perhaps one still being filled; NOT_FOUND otherwise), or -1 (least-loaded) when
  // it is empty.
  absl::StatusOr<int> placement(const std::string& field, const std::string& colocate_with,
                                const std::string& owner) const;

 private:
  std::atomic<bool> draining_{false};
  Runtime& runtime_;
  const ServiceLimits& limits_;
  const Authenticator& auth_;
};

}  // namespace matserve::server
