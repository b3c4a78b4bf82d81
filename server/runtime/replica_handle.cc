// Replica ids inside handles: see replica_handle.h.
#include "server/runtime/replica_handle.h"

#include "absl/strings/str_cat.h"

namespace matserve::server {
namespace {

bool id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

}  // namespace

absl::Status check_replica_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxReplicaIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("replica_id: must be 1 to ", kMaxReplicaIdBytes,
                                                   " characters, got ", id.size()));
  }
  for (char c : id) {
    if (!id_char(c)) {
      return absl::InvalidArgumentError("replica_id: only letters, digits and . _ : - are allowed");
    }
  }
  return absl::OkStatus();
}

std::string default_replica_id(std::string_view hostname, int port) {
  const std::string suffix = absl::StrCat(":", port);
  std::string host(hostname.substr(0, kMaxReplicaIdBytes - suffix.size()));
  for (char& c : host) {
    if (!id_char(c)) c = '-';
  }
  if (host.empty()) host = "replica";
  return host + suffix;
}

std::string make_handle(std::string_view replica, std::string_view secret) {
  if (replica.empty()) return std::string(secret);
  std::string handle(replica);
  handle.push_back(kReplicaSeparator);
  handle.append(secret);
  return handle;
}

std::optional<std::string_view> handle_replica(std::string_view handle) {
  const std::size_t at = handle.rfind(kReplicaSeparator);
  if (at == std::string_view::npos || at == 0) return std::nullopt;
  const std::string_view replica = handle.substr(0, at);
  if (!check_replica_id(replica).ok()) return std::nullopt;
  return replica;
}

}  // namespace matserve::server
