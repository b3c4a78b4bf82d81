// Handles that say which replica holds them: "<replica id>/<32 hex digits>", the digits 128 bits
// from the kernel's CSPRNG as before, so a handle stays unguessable. Clients read the replica id
// to send every call that names a handle to the replica that made it (docs/deploy.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace matserve::server {

inline constexpr std::size_t kMaxReplicaIdBytes = 48;
inline constexpr char kReplicaSeparator = '/';

// 1 to kMaxReplicaIdBytes of [A-Za-z0-9._:-]; INVALID_ARGUMENT naming --replica_id otherwise.
absl::Status check_replica_id(std::string_view id);

// "<hostname>:<port>" with the hostname cut to fit kMaxReplicaIdBytes and any character outside
// the replica id alphabet replaced by '-' ("replica" when the hostname is empty).
std::string default_replica_id(std::string_view hostname, int port);

// `replica` + "/" + `secret`; just `secret` when `replica` is empty.
std::string make_handle(std::string_view replica, std::string_view secret);

// The replica id a handle names; nullopt for a handle without one (or not of this form).
std::optional<std::string_view> handle_replica(std::string_view handle);

}  // namespace matserve::server
