// matserve: the server binary. From the checked configuration (config.h: every flag) it makes the
// parts (assembly.h: the runtime over its backend, the keep-awake, the metrics, the gRPC server),
// installs the message heap, then runs the lifecycle (lifecycle.h): health follows the devices
// until SIGTERM/SIGINT, then health goes NOT_SERVING, in-flight requests finish within the grace
// period, new ones are refused, and the process exits 0.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "matserve/version.h"
#include "server/assembly.h"
#include "server/config.h"
#include "server/lifecycle.h"
#include "server/metrics/metrics.h"
#include "server/metrics/metrics_http.h"
#include "server/runtime/cpu_keep_awake.h"
#include "server/runtime/message_memory.h"
#include "server/runtime/replica_handle.h"
#include "server/runtime/runtime.h"
#include "server/service/matrix_service.h"

namespace matserve::server {
namespace {

constexpr char kServiceName[] = "matserve.v1.MatrixService";

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

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
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = make_runtime(c);
  if (!runtime.ok()) return fail(runtime.status());
  // Large message buffers land in the backend's pinned memory while it lives (message_memory.h).
  const message_memory::Installation message_heap((*runtime)->backend().message_heap());
  absl::StatusOr<std::unique_ptr<CpuKeepAwake>> keep_awake = start_keep_awake(c);
  if (!keep_awake.ok()) return fail(keep_awake.status());

  Metrics metrics(BuildInfo{kVersion, kGitSha, kCudaVersion,
                            std::string(kernels::backend_name((*runtime)->backend().kind()))});
  connect_metrics(metrics, **runtime, keep_awake->get());
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> metrics_http = start_metrics_http(c, metrics);
  if (!metrics_http.ok()) return fail(metrics_http.status());

  MatrixServiceImpl service(**runtime, metrics, c.limits, c.auth, keep_awake->get());
  int port = 0;
  // The replica id goes into handles from the first call on: set before the port is announced
  // (a client learns an ephemeral port only from the banner).
  if (!c.replica_id.empty()) (*runtime)->residents().set_replica_id(c.replica_id);
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = start_grpc(c, service, port);
  if (!server.ok()) return fail(server.status());
  if (c.replica_id.empty()) {
    (*runtime)->residents().set_replica_id(default_replica_id(host_name(), port));
  }
  grpc::HealthCheckServiceInterface& health = *(*server)->GetHealthCheckService();
  set_serving(health, kServiceName, true);
  print_banner(c, **runtime, port, *metrics_http ? (*metrics_http)->port() : 0, keep_awake->get());

  const char* signal_name = nullptr;
  {
    const HealthWatch watch((*runtime)->backend(), health, kServiceName);
    signal_name = signals.wait();
  }
  std::printf("matserve: %s received: NOT_SERVING, draining in-flight requests (up to %d s)\n",
              signal_name, c.shutdown_grace_seconds);
  std::fflush(stdout);
  drain_and_stop(**server, health, kServiceName, service, metrics,
                 absl::Seconds(c.shutdown_grace_seconds));
  metrics_http->reset();
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
