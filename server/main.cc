// matserve: the server binary. Parses flags, creates the backend (CUDA or CPU), starts the gRPC
// service (with health and reflection) and the /metrics endpoint, and shuts down gracefully on
// SIGTERM/SIGINT: health goes NOT_SERVING, in-flight requests finish within the grace period,
// new ones are refused, then exit 0.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kernels/autotune.h"
#include "matserve/version.h"
#include "server/metrics/device_uuid.h"
#include "server/metrics/metrics.h"
#include "server/metrics/metrics_http.h"
#include "server/metrics/nvml.h"
#include "server/runtime/autotune_choice.h"
#include "server/runtime/backend_factory.h"
#include "server/runtime/runtime.h"
#include "server/service/matrix_service.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "gRPC address (host:port; port 0 picks a free one)");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9464",
          "HTTP address of /metrics (host:port; port 0 picks a free one; empty disables)");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{1} << 30,
          "largest gRPC message accepted or sent (gRPC's 4 MiB default is too small for real "
          "matrices; at most 2147483647)");
ABSL_FLAG(int64_t, max_dimension, 65536, "largest rows or cols of any matrix");
ABSL_FLAG(int64_t, max_matrix_bytes, int64_t{16} << 30,
          "largest byte size of any one matrix (inline matrices are also bounded by "
          "--max_message_bytes; larger ones travel through UploadStream/DownloadStream)");
ABSL_FLAG(std::string, backend, "auto",
          "compute backend: auto (CUDA if a GPU is visible), cuda, cpu");
ABSL_FLAG(std::string, devices, "", "CUDA device ordinals to use, comma-separated (default: all)");
ABSL_FLAG(int, streams_per_device, 4, "concurrent requests per GPU (one stream each)");
ABSL_FLAG(int, cpu_concurrency, 2, "concurrent requests on the CPU backend");
ABSL_FLAG(int64_t, memory_budget_bytes, 0,
          "memory the server may use per device for requests and resident matrices "
          "(0: 90% of a GPU's memory, a quarter of host memory on the CPU backend)");
ABSL_FLAG(int, max_queue_per_device, 256,
          "requests that may wait for a device before new ones "
          "are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, resident_ttl_seconds, 600, "a resident matrix idle this long is released");
ABSL_FLAG(std::string, autotune_table, "",
          "measured variant table for `auto` (TSV from `gemm_bench --autotune-out`, e.g. "
          "kernels/autotune/h100.tsv); without one `auto` takes cuBLAS on a GPU");
ABSL_FLAG(int, shutdown_grace_seconds, 30,
          "on SIGTERM/SIGINT, how long in-flight requests may take before they are cancelled");

namespace matserve::server {
namespace {

constexpr char kServiceName[] = "matserve.v1.MatrixService";

absl::StatusOr<std::vector<int>> parse_devices(const std::string& list) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    int d = 0;
    if (!absl::SimpleAtoi(part, &d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices: '", std::string(part), "' is not a device ordinal"));
    }
    out.push_back(d);
  }
  return out;
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "matserve: %s\n", s.ToString().c_str());
  return 2;
}

int run() {
  // Signals are taken by one thread with sigwait; block them before any other thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ServiceLimits limits;
  limits.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  limits.max_dimension = absl::GetFlag(FLAGS_max_dimension);
  limits.max_matrix_bytes = absl::GetFlag(FLAGS_max_matrix_bytes);
  if (limits.max_message_bytes < 1024 || limits.max_message_bytes > 2147483647) {
    return fail(absl::InvalidArgumentError("max_message_bytes: must be in [1024, 2147483647]"));
  }

  BackendOptions options;
  options.backend = absl::GetFlag(FLAGS_backend);
  absl::StatusOr<std::vector<int>> devices = parse_devices(absl::GetFlag(FLAGS_devices));
  if (!devices.ok()) return fail(devices.status());
  options.devices = *devices;
  options.streams_per_device = absl::GetFlag(FLAGS_streams_per_device);
  options.cpu_concurrency = absl::GetFlag(FLAGS_cpu_concurrency);
  options.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget_bytes);
  options.max_queue = absl::GetFlag(FLAGS_max_queue_per_device);
  absl::StatusOr<std::unique_ptr<Backend>> backend = make_backend(options);
  if (!backend.ok()) return fail(backend.status());
  TunedChoice tuned;
  if (const std::string path = absl::GetFlag(FLAGS_autotune_table); !path.empty()) {
    absl::StatusOr<kernels::AutotuneTable> table = kernels::AutotuneTable::load(path);
    if (!table.ok()) return fail(table.status());
    const std::vector<DeviceDescription> devs = (*backend)->devices();
    std::printf("matserve: autotune table %s (%zu measurements)\n", path.c_str(),
                table->entries().size());
    tuned =
        make_tuned_choice(*std::move(table), devs.empty() ? "" : devs[0].name, (*backend)->kind());
  }
  Runtime runtime(*std::move(backend), std::move(tuned),
                  absl::Seconds(absl::GetFlag(FLAGS_resident_ttl_seconds)));
  const std::string backend_name(kernels::backend_name(runtime.backend().kind()));

  Metrics metrics(BuildInfo{kVersion, kGitSha, kCudaVersion, backend_name});
  metrics.set_runtime_source([&runtime] {
    return RuntimeSnapshot{runtime.backend().stats(), runtime.residents().stats()};
  });
  std::vector<int> ordinals;
  if (runtime.backend().kind() == kernels::Backend::kCuda) {
    for (const DeviceDescription& d : runtime.backend().devices()) ordinals.push_back(d.index);
  }
  // No NVIDIA driver: no NVML, no GPU metrics.
  metrics.set_gpu_source(Nvml::load(), cuda_device_labels(ordinals));
  std::unique_ptr<MetricsHttpServer> metrics_http;
  if (const std::string addr = absl::GetFlag(FLAGS_metrics_listen); !addr.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> m =
        MetricsHttpServer::start(addr, [&metrics] { return metrics.scrape(); });
    if (!m.ok()) return fail(m.status());
    metrics_http = *std::move(m);
  }

  MatrixServiceImpl service(runtime, metrics, limits);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(limits.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(limits.max_message_bytes));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return fail(absl::UnavailableError(absl::StrCat("listen: cannot serve gRPC on ", listen)));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(kServiceName, true);
  health->SetServingStatus(true);

  const std::vector<DeviceDescription> devs = runtime.backend().devices();
  std::printf("matserve %s (git %s, CUDA %s): backend %s on %s%s\n", kVersion, kGitSha,
              kCudaVersion, backend_name.c_str(), devs.empty() ? "?" : devs[0].name.c_str(),
              devs.size() > 1 ? absl::StrCat(" and ", devs.size() - 1, " more").c_str() : "");
  const std::string host = listen.substr(0, listen.rfind(':'));
  std::printf("matserve: serving gRPC on %s:%d\n", host.c_str(), port);
  if (metrics_http) {
    const std::string maddr = absl::GetFlag(FLAGS_metrics_listen);
    std::printf("matserve: metrics on http://%s:%d/metrics\n",
                maddr.substr(0, maddr.rfind(':')).c_str(), metrics_http->port());
  }
  std::fflush(stdout);

  // Health follows the devices: a sticky CUDA error takes the service out of rotation.
  absl::Notification stopping;
  std::thread health_watch([&] {
    bool serving = true;
    while (!stopping.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      const bool now = runtime.backend().healthy();
      if (now != serving) {
        serving = now;
        health->SetServingStatus(kServiceName, serving);
        health->SetServingStatus(serving);
        std::fprintf(stderr, "matserve: health -> %s\n", serving ? "SERVING" : "NOT_SERVING");
      }
    }
  });

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::printf("matserve: %s received: NOT_SERVING, draining in-flight requests (up to %d s)\n",
              signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
              absl::GetFlag(FLAGS_shutdown_grace_seconds));
  std::fflush(stdout);
  stopping.Notify();
  health_watch.join();
  health->SetServingStatus(kServiceName, false);
  health->SetServingStatus(false);
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds)));
  server->Wait();
  metrics_http.reset();
  std::printf("matserve: stopped\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace matserve::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "matserve: GPU matrix-compute gRPC server (GEMM and transpose).\n"
      "  matserve [--listen=0.0.0.0:50051] [--backend=auto|cuda|cpu] ...\n"
      "See docs/ for the API, deployment and metrics.");
  absl::ParseCommandLine(argc, argv);
  return matserve::server::run();
}
