// Builds the server's parts from the checked configuration (config.h), one function per part, so
// that main.cc reads as the order they are made and torn down in: the runtime over its backend
// (with the autotune table for `auto`), the CPU keep-awake, the metrics' sources and their HTTP
// endpoint, and the gRPC server around the service.
#pragma once

#include <memory>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace matserve::server {

class CpuKeepAwake;
class MatrixServiceImpl;
class Metrics;
class MetricsHttpServer;
class Runtime;
struct ServerConfig;

// The backend (CUDA or CPU, as configured), the autotune table and the runtime's limits.
absl::StatusOr<std::unique_ptr<Runtime>> make_runtime(const ServerConfig& config);

// The keep-awake threads, or nullptr when --keep_cpus_awake_ms is 0.
absl::StatusOr<std::unique_ptr<CpuKeepAwake>> start_keep_awake(const ServerConfig& config);

// Points the metrics at the runtime's snapshots and, on CUDA, at NVML for the devices in use.
// `keep_awake` may be null; both must outlive the metrics' scrapes.
void connect_metrics(Metrics& metrics, Runtime& runtime, const CpuKeepAwake* keep_awake);

// The /metrics endpoint, or nullptr when --metrics_listen is empty.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> start_metrics_http(const ServerConfig& config,
                                                                      Metrics& metrics);

// The gRPC server with the service, health and reflection, listening; `port` is the one bound.
absl::StatusOr<std::unique_ptr<grpc::Server>> start_grpc(const ServerConfig& config,
                                                         MatrixServiceImpl& service, int& port);

}  // namespace matserve::server
