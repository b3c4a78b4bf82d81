// matserve: the server binary. From the checked configuration (config.h: every flag) it creates
// the backend (CUDA or CPU), the runtime, the message heap, the metrics and the gRPC service (with
// health and reflection), then runs the lifecycle (lifecycle.h): health follows the devices until
// SIGTERM/SIGINT, then health goes NOT_SERVING, in-flight requests finish within the grace
// period, new ones are refused, and the process exits 0.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <malloc.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/autotune.h"
#include "kernels/autotune_builtin.h"
#include "matserve/version.h"
#include "server/config.h"
#include "server/lifecycle.h"
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
namespace {

constexpr char kServiceName[] = "matserve.v1.MatrixService";

int fail(const absl::Status& s) {
  std::fprintf(stderr, "matserve: %s\n", s.ToString().c_str());
  return 2;
}

int run() {
  // Taken by one thread with sigwait: blocked before any other thread starts.
  const ShutdownSignals signals;

  absl::StatusOr<ServerConfig> config = config_from_flags();
  if (!config.ok()) return fail(config.status());
  const ServerConfig& c = *config;
  const ServiceLimits& limits = c.limits;
  const BackendOptions& options = c.backend;
  absl::StatusOr<std::unique_ptr<Backend>> backend = make_backend(options);
  if (!backend.ok()) return fail(backend.status());
  TunedChoice tuned;
  if (const std::string& path = c.autotune_table; path != "none") {
    absl::StatusOr<kernels::AutotuneTable> table =
        path.empty() ? kernels::AutotuneTable::parse(kernels::builtin_autotune_tsv())
                     : kernels::AutotuneTable::load(path);
    if (!table.ok()) return fail(table.status());
    const std::vector<DeviceDescription> devs = (*backend)->devices();
    std::printf("matserve: autotune table %s (%zu measurements)\n",
                path.empty() ? "built in" : path.c_str(), table->entries().size());
    tuned =
        make_tuned_choice(*std::move(table), devs.empty() ? "" : devs[0].name, (*backend)->kind());
  }
  Runtime runtime(*std::move(backend), std::move(tuned), c.resident_ttl,
                  BatchingOptions{.max_batch_size = limits.max_batch_size,
                                  .max_delay = absl::Microseconds(limits.max_batch_delay_us)});
  runtime.verify_budget().set_limit(limits.max_verify_bytes);
  runtime.shared_memory().set_max_regions_per_owner(limits.max_shm_regions_per_owner);
  const std::string backend_name(kernels::backend_name(runtime.backend().kind()));
  // Large message buffers land in the backend's pinned memory while it lives (message_memory.h).
  const message_memory::Installation message_heap(runtime.backend().message_heap());

  std::unique_ptr<CpuKeepAwake> keep_awake;
  if (c.keep_cpus_awake_ms > 0) {
    absl::StatusOr<std::unique_ptr<CpuKeepAwake>> k =
        CpuKeepAwake::start(absl::Milliseconds(c.keep_cpus_awake_ms), c.keep_cpus_awake_max_calls);
    if (!k.ok()) return fail(k.status());
    keep_awake = *std::move(k);
  }

  Metrics metrics(BuildInfo{kVersion, kGitSha, kCudaVersion, backend_name});
  metrics.set_runtime_source([&runtime, &keep_awake] {
    // The message heap's and the keep-awake's series are exported with zeros where there is none
    // (CPU backend, --pinned_message_bytes=0, no --keep_cpus_awake_ms), as the staging series
    // are, so dashboards always find them.
    return RuntimeSnapshot{runtime.backend().stats(), runtime.residents().stats(),
                           message_memory::stats(),
                           keep_awake != nullptr ? keep_awake->stats() : CpuKeepAwake::Stats{}};
  });
  std::vector<int> ordinals;
  if (runtime.backend().kind() == kernels::Backend::kCuda) {
    for (const DeviceDescription& d : runtime.backend().devices()) ordinals.push_back(d.index);
  }
  // No NVIDIA driver: no NVML, no GPU metrics.
  metrics.set_gpu_source(Nvml::load(), cuda_device_labels(ordinals));
  std::unique_ptr<MetricsHttpServer> metrics_http;
  if (const std::string& addr = c.metrics_listen; !addr.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> m =
        MetricsHttpServer::start(addr, [&metrics] { return metrics.scrape(); });
    if (!m.ok()) return fail(m.status());
    metrics_http = *std::move(m);
  }

  MatrixServiceImpl service(runtime, metrics, limits, c.auth, keep_awake.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string& listen = c.listen;
  builder.AddListeningPort(listen, c.credentials, &port);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, c.max_concurrent_streams);
  for (const auto& [name, value] : c.grpc_args) builder.AddChannelArgument(name, value);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS,
                              c.grpc_min_pollers);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              c.grpc_max_pollers);
  builder.SetMaxReceiveMessageSize(static_cast<int>(limits.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(limits.max_message_bytes));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return fail(absl::UnavailableError(absl::StrCat("listen: cannot serve gRPC on ", listen)));
  }
  grpc::HealthCheckServiceInterface& health = *server->GetHealthCheckService();
  set_serving(health, kServiceName, true);
  print_banner(c, runtime, port, metrics_http ? metrics_http->port() : 0, keep_awake.get());

  const char* signal_name = nullptr;
  {
    const HealthWatch watch(runtime.backend(), health, kServiceName);
    signal_name = signals.wait();
  }
  std::printf("matserve: %s received: NOT_SERVING, draining in-flight requests (up to %d s)\n",
              signal_name, c.shutdown_grace_seconds);
  std::fflush(stdout);
  drain_and_stop(*server, health, kServiceName, service, metrics,
                 absl::Seconds(c.shutdown_grace_seconds));
  metrics_http.reset();
  std::printf("matserve: stopped\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace matserve::server

int main(int argc, char** argv) {
  // Request and reply buffers of megabytes are allocated per call. With glibc's defaults each is a
  // fresh mmap whose pages fault in on first touch (about 1 ms per 4 MiB); keeping blocks up to
  // the largest threshold in the heap, and not trimming it, makes steady-state calls reuse warm
  // pages.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  absl::SetProgramUsageMessage(
      "GPU matrix-compute gRPC server (GEMM and transpose).\n"
      "  matserve [--listen=0.0.0.0:50051] [--backend=auto|cuda|cpu] ...\n"
      "docs/flags.md explains every flag; docs/ the API, deployment and metrics.");
  // --help and --helpshort list the server's own flags (all in server/config.cc, the same in the
  // CUDA and CPU-only builds; docs/flags.md is generated from them), not the libraries'
  // (--helpfull); files are named relative to the source tree.
  absl::FlagsUsageConfig usage;
  const auto server_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/config.cc");
  };
  usage.contains_help_flags = server_flags;
  usage.contains_helpshort_flags = server_flags;
  usage.normalize_filename = [](absl::string_view file) {
    const std::size_t at = file.rfind("server/");
    return std::string(at == absl::string_view::npos ? file : file.substr(at));
  };
  usage.version_string = [] {
    return absl::StrCat("matserve ", matserve::kVersion, " (git ", matserve::kGitSha, ", CUDA ",
                        matserve::kCudaVersion, ")\n");
  };
  absl::SetFlagsUsageConfig(std::move(usage));
  absl::ParseCommandLine(argc, argv);
  absl::SetMutexDeadlockDetectionMode(matserve::server::lock_order_checks_requested()
                                          ? absl::OnDeadlockCycle::kAbort
                                          : absl::OnDeadlockCycle::kIgnore);
  return matserve::server::run();
}
