// The server's parts from the checked configuration: see assembly.h.
#include "server/assembly.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "kernels/autotune.h"
#include "kernels/autotune_builtin.h"
#include "server/config.h"
#include "server/metrics/device_uuid.h"
#include "server/metrics/metrics.h"
#include "server/metrics/metrics_http.h"
#include "server/metrics/nvml.h"
#include "server/runtime/autotune_choice.h"
#include "server/runtime/backend_factory.h"
#include "server/runtime/cpu_keep_awake.h"
#include "server/runtime/message_memory.h"
#include "server/runtime/runtime.h"
#include "server/service/matrix_service.h"

namespace matserve::server {

absl::StatusOr<std::unique_ptr<Runtime>> make_runtime(const ServerConfig& config) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = make_backend(config.backend);
  if (!backend.ok()) return backend.status();
  TunedChoice tuned;
  if (const std::string& path = config.autotune_table; path != "none") {
    absl::StatusOr<kernels::AutotuneTable> table =
        path.empty() ? kernels::AutotuneTable::parse(kernels::builtin_autotune_tsv())
                     : kernels::AutotuneTable::load(path);
    if (!table.ok()) return table.status();
    const std::vector<DeviceDescription> devs = (*backend)->devices();
    std::printf("matserve: autotune table %s (%zu measurements)\n",
                path.empty() ? "built in" : path.c_str(), table->entries().size());
    tuned =
        make_tuned_choice(*std::move(table), devs.empty() ? "" : devs[0].name, (*backend)->kind());
  }
  const ServiceLimits& limits = config.limits;
  auto runtime = std::make_unique<Runtime>(
      *std::move(backend), std::move(tuned), config.resident_ttl,
      BatchingOptions{.max_batch_size = limits.max_batch_size,
                      .max_delay = absl::Microseconds(limits.max_batch_delay_us)});
  runtime->verify_budget().set_limit(limits.max_verify_bytes);
  runtime->residents().set_fill_timeout(absl::Seconds(limits.stream_idle_timeout_seconds));
  runtime->shared_memory().set_max_regions_per_owner(limits.max_shm_regions_per_owner);
  runtime->shared_memory().set_allow_other_uids(limits.shared_memory_allow_other_uids);
  runtime->shared_memory().set_max_bytes(limits.max_shared_memory_bytes_per_owner,
                                         limits.max_shared_memory_bytes);
  return runtime;
}

absl::StatusOr<std::unique_ptr<CpuKeepAwake>> start_keep_awake(const ServerConfig& config) {
  if (config.keep_cpus_awake_ms <= 0) return nullptr;
  return CpuKeepAwake::start(absl::Milliseconds(config.keep_cpus_awake_ms),
                             config.keep_cpus_awake_max_calls);
}

void connect_metrics(Metrics& metrics, Runtime& runtime, const CpuKeepAwake* keep_awake) {
  metrics.set_runtime_source([&runtime, keep_awake] {
    // The message heap's, the keep-awake's and the host matrices' series are exported with zeros
    // where there is none (CPU backend, --pinned_message_bytes=0, no --keep_cpus_awake_ms,
    // --max_host_matrix_bytes=0), as the staging series are, so dashboards always find them.
    return RuntimeSnapshot{runtime.backend().stats(), runtime.residents().stats(),
                           message_memory::stats(),
                           keep_awake != nullptr ? keep_awake->stats() : CpuKeepAwake::Stats{},
                           runtime.backend().host_matrix_stats().value_or(PoolStats{})};
  });
  std::vector<int> ordinals;
  if (runtime.backend().kind() == kernels::Backend::kCuda) {
    for (const DeviceDescription& d : runtime.backend().devices()) ordinals.push_back(d.index);
  }
  // No NVIDIA driver: no NVML, no GPU metrics.
  metrics.set_gpu_source(Nvml::load(), cuda_device_labels(ordinals));
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> start_metrics_http(const ServerConfig& config,
                                                                      Metrics& metrics) {
  if (config.metrics_listen.empty()) return nullptr;
  return MetricsHttpServer::start(config.metrics_listen, [&metrics] { return metrics.scrape(); });
}

absl::StatusOr<std::unique_ptr<grpc::Server>> start_grpc(const ServerConfig& config,
                                                         MatrixServiceImpl& service, int& port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  port = 0;
  builder.AddListeningPort(config.listen, config.credentials, &port);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, config.max_concurrent_streams);
  for (const auto& [name, value] : config.grpc_args) builder.AddChannelArgument(name, value);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS,
                              config.grpc_min_pollers);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              config.grpc_max_pollers);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.limits.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.limits.max_message_bytes));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("listen: cannot serve gRPC on ", config.listen));
  }
  return server;
}

}  // namespace matserve::server
