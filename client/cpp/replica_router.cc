// Routing over several replicas: see replica_router.h.
#include "client/cpp/replica_router.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace matserve::client {
namespace {

constexpr std::size_t kMaxReplicaId = 48;

bool id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

std::string shown(std::string_view handle) {
  return "'" + std::string(handle.substr(0, 80)) + "'";
}

absl::Status from_grpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

std::optional<std::string> handle_replica(std::string_view handle) {
  const std::size_t at = handle.rfind('/');
  if (at == std::string_view::npos || at == 0 || at > kMaxReplicaId) return std::nullopt;
  const std::string_view id = handle.substr(0, at);
  if (!std::all_of(id.begin(), id.end(), id_char)) return std::nullopt;
  return std::string(id);
}

absl::StatusOr<std::vector<std::string>> resolve_addresses(const std::string& host_port) {
  std::string host = host_port, port = "443";
  if (absl::StartsWith(host_port, "[")) {
    const std::size_t close = host_port.find(']');
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", host_port, "': unclosed '['"));
    }
    host = host_port.substr(1, close - 1);
    if (close + 1 < host_port.size()) port = host_port.substr(close + 2);
  } else if (const std::size_t colon = host_port.rfind(':'); colon != std::string::npos) {
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host_port, "': ", gai_strerror(rc)));
  }
  std::vector<std::string> out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char ip[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof ip, nullptr, 0, NI_NUMERICHOST) != 0) {
      continue;
    }
    std::string address = a->ai_family == AF_INET6 ? absl::StrCat("ipv6:[", ip, "]:", port)
                                                   : absl::StrCat("ipv4:", ip, ":", port);
    if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(address);
  }
  freeaddrinfo(found);
  return out;
}

absl::StatusOr<std::optional<std::vector<std::string>>> replica_addresses(
    const std::string& target, const Resolver& resolver) {
  if (target.find(',') != std::string::npos) {
    std::vector<std::string> out;
    for (absl::string_view part : absl::StrSplit(target, ',')) {
      part = absl::StripAsciiWhitespace(part);
      if (part.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("target '", target, "': an empty address in the list"));
      }
      out.emplace_back(part);
    }
    return out;
  }
  if (absl::StartsWith(target, "dns:///")) {
    absl::StatusOr<std::vector<std::string>> out = resolver(target.substr(7));
    if (!out.ok()) return out.status();
    if (out->empty()) {
      return absl::UnavailableError(absl::StrCat("target '", target, "' resolves to no address"));
    }
    return *std::move(out);
  }
  return std::nullopt;
}

namespace {

Route first_of(std::initializer_list<const std::string*> handles,
               std::initializer_list<const std::string*> regions) {
  Route r;
  for (const std::string* h : handles) {
    if (!h->empty()) {
      r.handle = *h;
      return r;
    }
  }
  for (const std::string* g : regions) {
    if (!g->empty()) {
      r.region = *g;
      return r;
    }
  }
  return r;
}

const std::string& first(const google::protobuf::RepeatedPtrField<std::string>& list) {
  static const std::string empty;
  return list.empty() ? empty : list[0];
}

}  // namespace

Route route_of(const v1::MultiplyRequest& r) {
  return first_of({&r.a_handle(), &r.b_handle(), &r.c_handle()},
                  {&r.a().shm().region(), &r.b().shm().region(), &r.c().shm().region(),
                   &r.output_shm().region()});
}

Route route_of(const v1::MultiplyBatchedRequest& r) {
  return first_of({&first(r.a_handles()), &first(r.b_handles()), &first(r.c_handles())},
                  {&r.a().shm().region(), &r.b().shm().region(), &r.c().shm().region(),
                   &r.output_shm().region()});
}

Route route_of(const v1::TransposeRequest& r) {
  return first_of({&r.a_handle()}, {&r.a().shm().region(), &r.output_shm().region()});
}

ReplicaRouter::ReplicaRouter(std::string target, std::vector<Replica> replicas,
                             PrepareContext prepare, bool routed)
    : target_(std::move(target)),
      replicas_(std::move(replicas)),
      prepare_(std::move(prepare)),
      routed_(routed) {
  // Round robin from a random replica: short-lived clients (one CLI call each) spread out.
  turn_ = std::random_device()() % std::max<std::size_t>(replicas_.size(), 1);
}

ReplicaRouter::Replica* ReplicaRouter::next(const std::vector<Replica*>& skip) {
  const std::size_t n = replicas_.size();
  const std::size_t start = turn_.fetch_add(1, std::memory_order_relaxed);
  Replica* fallback = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t i = 0; i < n; ++i) {
    Replica* r = &replicas_[(start + i) % n];
    if (std::find(skip.begin(), skip.end(), r) != skip.end()) continue;
    if (!down_[r]) return r;
    if (fallback == nullptr) fallback = r;
  }
  return fallback;
}

void ReplicaRouter::identify() {
  for (Replica& r : replicas_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (std::any_of(by_id_.begin(), by_id_.end(), [&](const auto& e) { return e.second == &r; }))
        continue;
    }
    grpc::ClientContext context;
    prepare_(context);
    v1::GetServerInfoReply info;
    if (!r.stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok()) continue;
    if (info.replica_id().empty()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    by_id_[info.replica_id()] = &r;
  }
}

std::vector<std::string> ReplicaRouter::known_ids() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [id, r] : by_id_) out.push_back(absl::StrCat(id, " (", r->address, ")"));
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<ReplicaRouter::Replica*> ReplicaRouter::for_handle(const std::string& handle) {
  const std::optional<std::string> id = handle_replica(handle);
  if (!id) {
    return absl::NotFoundError(absl::StrCat("handle ", shown(handle), " names no replica, and ",
                                            "target '", target_,
                                            "' names several: cannot route it"));
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) identify();
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = by_id_.find(*id); it != by_id_.end()) return it->second;
  }
  const std::vector<std::string> known = known_ids();
  return absl::NotFoundError(absl::StrCat(
      "handle ", shown(handle), ": replica '", *id, "' is not among the replicas of target '",
      target_, "' (known: ", known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
}

absl::Status ReplicaRouter::gone(const std::string& handle, const Replica& r,
                                 const grpc::Status& s) const {
  return absl::NotFoundError(absl::StrCat("handle ", shown(handle), ": replica '",
                                          handle_replica(handle).value_or(""), "' (", r.address,
                                          ") that holds it is not reachable: ", s.error_message()));
}

void ReplicaRouter::set_region(const std::string& name, Replica* replica) {
  std::lock_guard<std::mutex> lock(mu_);
  if (replica == nullptr) {
    regions_.erase(name);
  } else {
    regions_[name] = replica;
  }
}

absl::Status ReplicaRouter::run(const Route& route, const Call& call, Replica** used) {
  Replica* pinned = nullptr;
  if (!routed_) {
    pinned = &replicas_[0];
  } else if (!route.handle.empty()) {
    absl::StatusOr<Replica*> r = for_handle(route.handle);
    if (!r.ok()) return r.status();
    pinned = *r;
  } else if (!route.region.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = regions_.find(route.region); it != regions_.end()) pinned = it->second;
  }
  if (pinned != nullptr) {
    grpc::ClientContext context;
    prepare_(context);
    const grpc::Status s = call(*pinned, context);
    if (used != nullptr) *used = pinned;
    if (routed_ && !route.handle.empty() && s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      return gone(route.handle, *pinned, s);
    }
    return from_grpc(s);
  }
  std::vector<Replica*> tried;
  grpc::Status last;
  while (Replica* r = next(tried)) {
    grpc::ClientContext context;
    prepare_(context);
    last = call(*r, context);
    {
      std::lock_guard<std::mutex> lock(mu_);
      down_[r] = last.error_code() == grpc::StatusCode::UNAVAILABLE;
    }
    if (last.error_code() != grpc::StatusCode::UNAVAILABLE) {
      if (used != nullptr) *used = r;
      return from_grpc(last);
    }
    tried.push_back(r);
  }
  return from_grpc(last);
}

absl::Status ReplicaRouter::each(const Call& call) {
  absl::Status first_unavailable;
  bool any = false;
  for (Replica& r : replicas_) {
    grpc::ClientContext context;
    prepare_(context);
    const grpc::Status s = call(r, context);
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      if (first_unavailable.ok()) first_unavailable = from_grpc(s);
      continue;
    }
    if (!s.ok()) return from_grpc(s);
    any = true;
  }
  return any ? absl::OkStatus() : first_unavailable;
}

}  // namespace matserve::client
