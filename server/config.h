// The server's configuration: every command-line flag, read once and checked, in one value.
// main.cc builds and runs the process from it (the lifecycle: backend, runtime, metrics, gRPC
// service, health, drain); nothing else reads flags. A bad value is an INVALID_ARGUMENT naming
// the flag and its range, reported before anything starts.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/runtime/backend_factory.h"
#include "server/service/auth.h"
#include "server/service/limits.h"

namespace matserve::server {

struct ServerConfig {
  std::string listen;          // gRPC address
  std::string metrics_listen;  // /metrics address; empty: none
  std::string replica_id;      // --replica_id; empty: <hostname>:<port>, known once bound
  ServiceLimits limits;
  BackendOptions backend;      // host limits read and copy threads resolved
  std::string autotune_table;  // "" built in, "none", or a file
  absl::Duration resident_ttl;
  Authenticator auth;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  bool tls = false, mutual_tls = false;
  std::vector<std::pair<std::string, int>> grpc_args;  // --grpc_channel_args
  int max_concurrent_streams = 256;
  int grpc_min_pollers = 8, grpc_max_pollers = 128;
  int keep_cpus_awake_ms = 0, keep_cpus_awake_max_calls = 1;
  int shutdown_grace_seconds = 30;
};

// Reads and checks every flag (after absl::ParseCommandLine).
absl::StatusOr<ServerConfig> config_from_flags();

// --check_lock_order: Abseil's lock-order checks (tests); read before anything locks.
bool lock_order_checks_requested();

}  // namespace matserve::server
