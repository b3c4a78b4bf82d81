// Routing over several replicas of one target ("host:port,host:port", or a "dns:///name:port"
// resolved to every address it has): one channel each, calls on a resident handle to the replica
// whose id the handle carries ("<replica id>/<32 hex>"), calls on a region to the replica it was
// registered with, every other call round robin (docs/client.md).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "matserve/v1/matrix_service.grpc.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace matserve::client {

// The replica id of a handle ("<id>/<secret>", the id 1 to 48 of [A-Za-z0-9._:-]); nullopt for
// a handle without one.
std::optional<std::string> handle_replica(std::string_view handle);

// "host:port" -> every address it resolves to, as gRPC targets ("ipv4:10.0.0.5:50051",
// "ipv6:[::1]:50051"), without repeats.
using Resolver = std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)>;
absl::StatusOr<std::vector<std::string>> resolve_addresses(const std::string& host_port);

// The replicas a target names: a comma-separated list, or a dns:/// target's addresses (through
// `resolver`); nullopt for any other target (one channel, resolved by gRPC).
absl::StatusOr<std::optional<std::vector<std::string>>> replica_addresses(
    const std::string& target, const Resolver& resolver = resolve_addresses);

// The handles and regions a request names, first one first (what routes it).
struct Route {
  std::string handle;  // empty: none
  std::string region;  // empty: none
};
Route route_of(const ::matserve::v1::MultiplyRequest& r);
Route route_of(const ::matserve::v1::MultiplyBatchedRequest& r);
Route route_of(const ::matserve::v1::TransposeRequest& r);

class ReplicaRouter {
 public:
  struct Replica {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<::matserve::v1::MatrixService::StubInterface> stub;
    std::unique_ptr<::grpc::health::v1::Health::StubInterface> health;
  };
  // Sets a call's deadline and metadata.
  using PrepareContext = std::function<void(grpc::ClientContext&)>;

  // `target` names the replicas in messages; `routed`: several replicas (false: one, every call
  // to it, handles not read).
  ReplicaRouter(std::string target, std::vector<Replica> replicas, PrepareContext prepare,
                bool routed);

  bool routed() const { return routed_; }
  std::size_t size() const { return replicas_.size(); }
  Replica& replica(std::size_t i) { return replicas_[i]; }

  // Runs `call(replica, context)` where `route` says: the handle's replica (a replica not known:
  // NOT_FOUND naming it; one that answers UNAVAILABLE: NOT_FOUND naming it, as its matrices are
  // gone), the region's, or the next in turn (one answering UNAVAILABLE: the next after it).
  // `used` (optional) is set to the replica that answered.
  using Call = std::function<grpc::Status(Replica&, grpc::ClientContext&)>;
  absl::Status run(const Route& route, const Call& call, Replica** used = nullptr);
  // The next replica in turn (the only one when not routed), e.g. for a region to register.
  Replica* pick() { return routed_ ? next({}) : &replicas_[0]; }
  // The replica holding `handle` (NOT_FOUND naming it when none of the target's).
  absl::StatusOr<Replica*> for_handle(const std::string& handle);
  // Every replica in turn (lists, "unregister all"): UNAVAILABLE ones skipped unless all are.
  absl::Status each(const Call& call);
  // Calls on region `name` go to `replica` from now on (nullptr: forget it).
  void set_region(const std::string& name, Replica* replica);
  // The replicas whose ids are known, "id (address)", for messages and tests.
  std::vector<std::string> known_ids();

 private:
  Replica* next(const std::vector<Replica*>& skip);
  void identify();
  absl::Status gone(const std::string& handle, const Replica& r, const grpc::Status& s) const;

  const std::string target_;
  std::vector<Replica> replicas_;
  const PrepareContext prepare_;
  const bool routed_;
  std::atomic<std::size_t> turn_{0};
  std::mutex mu_;
  // Guarded by mu_: replicas by id (learnt from GetServerInfo), regions by name, and the
  // replicas that last answered UNAVAILABLE (tried last in turn).
  std::unordered_map<std::string, Replica*> by_id_;
  std::unordered_map<std::string, Replica*> regions_;
  std::unordered_map<const Replica*, bool> down_;
};

}  // namespace matserve::client
