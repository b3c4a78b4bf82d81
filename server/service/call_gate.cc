// CallGate: drain refusal, authentication, quota, and the owner's handles and regions.
#include "server/service/call_gate.h"

#include <memory>

#include "absl/strings/str_cat.h"

namespace matserve::server {

absl::Status shared_memory_off(const std::string& field) {
  return absl::FailedPreconditionError(
      absl::StrCat(field, ": shared memory is off on this server (--shared_memory=false)"));
}

absl::StatusOr<std::string> CallGate::authorize(const grpc::ServerContext& context, Permission need,
                                                const char* rpc) const {
  if (draining_.load()) {
    return absl::UnavailableError(
        absl::StrCat(rpc,
                     ": the server is shutting down; the request was not started (retry it "
                     "on another replica)"));
  }
  return auth_.authenticate(context, need, rpc);
}

absl::StatusOr<std::string> CallGate::authorize_compute(const grpc::ServerContext& context,
                                                        bool resident, const char* rpc) const {
  absl::StatusOr<std::string> owner = authorize(context, Permission::kCompute, rpc);
  if (!owner.ok() || !resident) return owner;
  return authorize(context, Permission::kResident, rpc);
}

absl::StatusOr<QuotaReservation> CallGate::reserve_quota(const std::string& owner,
                                                         std::size_t more) const {
  return runtime_.residents().reserve(owner, static_cast<std::int64_t>(more),
                                      limits_.max_resident_bytes_per_owner);
}

std::int64_t CallGate::quota_room(const std::string& owner) const {
  return runtime_.residents().room_of(owner, limits_.max_resident_bytes_per_owner);
}

// Both resolvers hold `owner` by reference: small enough for std::function's inline storage, so
// building them on every request allocates nothing.
HandleResolver CallGate::handles(const std::string& owner) const {
  return [this, &owner](const std::string& field, const std::string& handle) {
    return runtime_.residents().get(field, handle, owner);
  };
}

RegionResolver CallGate::regions(const std::string& owner) const {
  return [this, &owner](
             const std::string& field,
             const std::string& name) -> absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> {
    if (!limits_.shared_memory) return shared_memory_off(field);
    return runtime_.shared_memory().find(owner, name, field);
  };
}

absl::StatusOr<int> CallGate::placement(const std::string& field, const std::string& colocate_with,
                                        const std::string& owner) const {
  if (colocate_with.empty()) return -1;
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> other =
      runtime_.residents().find(field, colocate_with, owner);
  if (!other.ok()) return other.status();
  return (*other)->device;
}

}  // namespace matserve::server
