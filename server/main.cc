// matserve: the server binary. Parses flags, creates the backend (CUDA or CPU), starts the gRPC
// service (with health and reflection) and the /metrics endpoint, and shuts down gracefully on
// SIGTERM/SIGINT: health goes NOT_SERVING, in-flight requests finish within the grace period,
// new ones are refused, then exit 0.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <malloc.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kernels/autotune.h"
#include "kernels/autotune_builtin.h"
#include "matserve/version.h"
#include "server/metrics/device_uuid.h"
#include "server/metrics/metrics.h"
#include "server/metrics/metrics_http.h"
#include "server/metrics/nvml.h"
#include "server/runtime/autotune_choice.h"
#include "server/runtime/backend_factory.h"
#include "server/runtime/cpu_keep_awake.h"
#include "server/runtime/host_limits.h"
#include "server/runtime/message_memory.h"
#include "server/runtime/runtime.h"
#include "server/service/auth.h"
#include "server/service/matrix_service.h"
#include "server/service/tls_files.h"

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
ABSL_FLAG(int, copy_threads, -1,
          "CUDA: helper threads that copy inline request and reply bytes through pinned staging "
          "(0: the request's own thread only; -1: three quarters of the CPUs the process may use "
          "(affinity and cgroup CPU limit) less one, at most 11, which bench/staging_bench "
          "measured fastest on a 16-core host)");
ABSL_FLAG(int, launch_graphs_per_stream, 64,
          "CUDA: launches kept per stream as CUDA graphs and replayed when a request repeats one "
          "(same shape, buffers, scalars, variant); 0 = launch every request directly");
ABSL_FLAG(int64_t, pinned_message_bytes, int64_t{1} << 30,
          "CUDA: pinned host memory in which large request and reply buffers are placed as gRPC "
          "parses and sends them, so they reach the GPU by DMA with no staging copy (blocks that "
          "do not fit are staged as usual; 0: none)");
ABSL_FLAG(int, cpu_concurrency, 2, "concurrent requests on the CPU backend");
ABSL_FLAG(int64_t, memory_budget_bytes, 0,
          "memory the server may use per device for requests and resident matrices "
          "(0: 90% of a GPU's memory, a quarter of the process's memory limit (host or cgroup) on "
          "the CPU backend); at most 90% of either: a larger value is clamped, with a warning");
ABSL_FLAG(int, max_queue_per_device, 256,
          "requests that may wait for a device before new ones "
          "are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, resident_ttl_seconds, 600, "a resident matrix idle this long is released");
ABSL_FLAG(std::string, autotune_table, "",
          "measured variant table for `auto` (TSV from `gemm_bench --autotune-out`); empty: the "
          "tables built in from kernels/autotune/*.tsv; 'none': `auto` takes cuBLAS on a GPU. "
          "On a device no table has rows for, `auto` takes cuBLAS");
ABSL_FLAG(
    std::string, auth_tokens_file, "",
    "bearer tokens, '<token> <name> [info,compute,resident,shm]' one per line or separated by "
    "';', '#' comment lines; or the same in $MATSERVE_AUTH_TOKENS (not both). A source that "
    "holds no token stops the server. Without either, no authentication");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve gRPC over TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require and verify client certificates (mutual TLS)");
ABSL_FLAG(int64_t, max_resident_bytes_per_owner, 0,
          "resident bytes one caller (token) may hold; 0: only the device budget limits it");
ABSL_FLAG(double, max_verify_flops, 2.0 * 4096 * 4096 * 4096,
          "largest GEMM (2*m*n*k) whose `verify` float64 reference the server computes on its "
          "CPU; larger ones are refused (0: verify refused)");
ABSL_FLAG(int64_t, max_verify_bytes, int64_t{1} << 30,
          "host memory that the float64 references of `verify` may hold, one request's and all "
          "at once (others wait for their turn); a request needing more is refused");
ABSL_FLAG(bool, shared_memory, true,
          "accept shared-memory regions from clients on this node (RegisterSharedMemory): the "
          "server opens the POSIX shared-memory objects they name");
ABSL_FLAG(int, max_shm_regions_per_owner, 64,
          "shared-memory regions one caller (token) may have registered at once");
ABSL_FLAG(int64_t, max_batch_products, 65536,
          "most products in one MultiplyBatched call (batch field)");
ABSL_FLAG(int, max_batch_size, 0,
          "dynamic batching: concurrent compatible Multiply requests merged into one launch, at "
          "most this many (0 or 1: off); a lone request is never delayed");
ABSL_FLAG(int64_t, max_batch_delay_us, 500,
          "dynamic batching: the longest a request waits for others to join its launch");
ABSL_FLAG(int64_t, stream_idle_timeout_seconds, 60,
          "an UploadStream or DownloadStream that moves no chunk for this long is cancelled and "
          "its memory freed (0: never)");
ABSL_FLAG(int, max_concurrent_streams, 256, "concurrent RPCs per client connection");
ABSL_FLAG(std::string, grpc_channel_args, "",
          "more integer gRPC server arguments, NAME=INT comma-separated (transport tuning, e.g. "
          "grpc.http2.max_frame_size=1048576)");
ABSL_FLAG(int, grpc_min_pollers, 8,
          "gRPC threads kept waiting for calls: a call that finds none pays a thread creation");
ABSL_FLAG(int, grpc_max_pollers, 128, "most idle gRPC threads kept (more exit after their call)");
ABSL_FLAG(int, keep_cpus_awake_ms, 0,
          "after each call, keep every CPU busy for this many ms with idle-priority spinners, so "
          "the next call's wake-ups do not wait for a halted CPU (in a VM, tens of microseconds "
          "each); trades CPU time and power for latency. 0: off. docs/deploy.md");
ABSL_FLAG(int, keep_cpus_awake_max_calls, 1,
          "with --keep_cpus_awake_ms: the spinners pause for 20 ms whenever more calls than this "
          "are running at once (with concurrent clients the CPUs rarely halt, and the spinners "
          "would get in the scheduler's way)");
ABSL_FLAG(bool, check_lock_order, false,
          "abort on a cycle in the order absl::Mutex locks are taken (absl's deadlock "
          "detector). The distribution builds absl with it on, which costs every lock "
          "acquisition a global graph update; off in production, on in the end-to-end tests");
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

// Plaintext unless --tls_cert/--tls_key are given; mutual TLS with --tls_client_ca.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials() {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert);
  const std::string key = absl::GetFlag(FLAGS_tls_key);
  const std::string ca = absl::GetFlag(FLAGS_tls_client_ca);
  if (cert.empty() && key.empty()) {
    if (!ca.empty())
      return absl::InvalidArgumentError("tls_client_ca: needs --tls_cert and --tls_key");
    return grpc::InsecureServerCredentials();
  }
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError("tls_cert, tls_key: give both or neither");
  }
  // Every file is read and checked (PEM content, the key belongs to the certificate) here, so
  // that a misconfiguration stops the server with a message naming the flag.
  absl::StatusOr<grpc::SslServerCredentialsOptions> options = load_tls_options(cert, key, ca);
  if (!options.ok()) return options.status();
  return grpc::SslServerCredentials(*options);
}

absl::StatusOr<Authenticator> authenticator() {
  return Authenticator::from_sources(absl::GetFlag(FLAGS_auth_tokens_file),
                                     std::getenv("MATSERVE_AUTH_TOKENS"));
}

bool is_loopback(const std::string& listen) {
  return listen.rfind("127.", 0) == 0 || listen.rfind("localhost:", 0) == 0 ||
         listen.rfind("[::1]:", 0) == 0 || listen.rfind("unix:", 0) == 0;
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
  limits.max_resident_bytes_per_owner = absl::GetFlag(FLAGS_max_resident_bytes_per_owner);
  limits.max_verify_flops = absl::GetFlag(FLAGS_max_verify_flops);
  limits.max_verify_bytes = absl::GetFlag(FLAGS_max_verify_bytes);
  limits.stream_idle_timeout_seconds = absl::GetFlag(FLAGS_stream_idle_timeout_seconds);
  limits.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  limits.max_shm_regions_per_owner = absl::GetFlag(FLAGS_max_shm_regions_per_owner);
  limits.max_batch_products = absl::GetFlag(FLAGS_max_batch_products);
  limits.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  limits.max_batch_delay_us = absl::GetFlag(FLAGS_max_batch_delay_us);
  absl::StatusOr<Authenticator> auth = authenticator();
  if (!auth.ok()) return fail(auth.status());
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = server_credentials();
  if (!credentials.ok()) return fail(credentials.status());
  if (limits.max_message_bytes < 1024 || limits.max_message_bytes > 2147483647) {
    return fail(absl::InvalidArgumentError("max_message_bytes: must be in [1024, 2147483647]"));
  }
  if (absl::Status s = check_limits(limits); !s.ok()) return fail(s);
  std::vector<std::pair<std::string, int>> grpc_args;
  for (absl::string_view arg :
       absl::StrSplit(absl::GetFlag(FLAGS_grpc_channel_args), ',', absl::SkipEmpty())) {
    const std::size_t eq = arg.find('=');
    int value = 0;
    if (eq == absl::string_view::npos || eq == 0 || !absl::SimpleAtoi(arg.substr(eq + 1), &value)) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("grpc_channel_args: '", std::string(arg), "' is not NAME=INTEGER")));
    }
    grpc_args.emplace_back(std::string(arg.substr(0, eq)), value);
  }

  BackendOptions options;
  options.backend = absl::GetFlag(FLAGS_backend);
  absl::StatusOr<std::vector<int>> devices = parse_devices(absl::GetFlag(FLAGS_devices));
  if (!devices.ok()) return fail(devices.status());
  options.devices = *devices;
  options.streams_per_device = absl::GetFlag(FLAGS_streams_per_device);
  options.cpu_concurrency = absl::GetFlag(FLAGS_cpu_concurrency);
  options.copy_threads = absl::GetFlag(FLAGS_copy_threads);
  const HostLimits host_limits = read_host_limits();
  if (options.copy_threads == -1) {
    // From the CPUs this process may use (its affinity and its cgroup's CPU quota, as a
    // container's CPU limit sets it), not the host's cores.
    options.copy_threads = std::clamp(host_limits.cpus * 3 / 4 - 1, 1, 11);
  } else if (options.copy_threads < 0 || options.copy_threads > 64) {
    return fail(absl::InvalidArgumentError("copy_threads: must be -1 or in [0, 64]"));
  }
  if (const std::int64_t pinned = absl::GetFlag(FLAGS_pinned_message_bytes);
      pinned < 0 || pinned > (std::int64_t{1} << 40)) {
    return fail(absl::InvalidArgumentError("pinned_message_bytes: must be in [0, 2^40]"));
  } else {
    options.pinned_message_bytes = static_cast<std::size_t>(pinned);
  }
  options.launch_graphs_per_stream = absl::GetFlag(FLAGS_launch_graphs_per_stream);
  if (options.launch_graphs_per_stream < 0 || options.launch_graphs_per_stream > 4096) {
    return fail(absl::InvalidArgumentError("launch_graphs_per_stream: must be in [0, 4096]"));
  }
  options.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget_bytes);
  options.host = host_limits;
  options.max_queue = absl::GetFlag(FLAGS_max_queue_per_device);
  absl::StatusOr<std::unique_ptr<Backend>> backend = make_backend(options);
  if (!backend.ok()) return fail(backend.status());
  TunedChoice tuned;
  if (const std::string path = absl::GetFlag(FLAGS_autotune_table); path != "none") {
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
  Runtime runtime(*std::move(backend), std::move(tuned),
                  absl::Seconds(absl::GetFlag(FLAGS_resident_ttl_seconds)),
                  BatchingOptions{.max_batch_size = limits.max_batch_size,
                                  .max_delay = absl::Microseconds(limits.max_batch_delay_us)});
  runtime.verify_budget().set_limit(limits.max_verify_bytes);
  runtime.shared_memory().set_max_regions_per_owner(limits.max_shm_regions_per_owner);
  const std::string backend_name(kernels::backend_name(runtime.backend().kind()));

  std::unique_ptr<CpuKeepAwake> keep_awake;
  if (const int ms = absl::GetFlag(FLAGS_keep_cpus_awake_ms); ms < 0 || ms > 60000) {
    return fail(absl::InvalidArgumentError("keep_cpus_awake_ms: must be in [0, 60000]"));
  } else if (ms > 0) {
    const int max_calls = absl::GetFlag(FLAGS_keep_cpus_awake_max_calls);
    if (max_calls < 1) {
      return fail(absl::InvalidArgumentError("keep_cpus_awake_max_calls: must be >= 1"));
    }
    absl::StatusOr<std::unique_ptr<CpuKeepAwake>> k =
        CpuKeepAwake::start(absl::Milliseconds(ms), max_calls);
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
  if (const std::string addr = absl::GetFlag(FLAGS_metrics_listen); !addr.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> m =
        MetricsHttpServer::start(addr, [&metrics] { return metrics.scrape(); });
    if (!m.ok()) return fail(m.status());
    metrics_http = *std::move(m);
  }

  MatrixServiceImpl service(runtime, metrics, limits, *auth, keep_awake.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, *credentials, &port);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             absl::GetFlag(FLAGS_max_concurrent_streams));
  for (const auto& [name, value] : grpc_args) builder.AddChannelArgument(name, value);
  // gRPC's sync server keeps 1-2 polling threads by default: with more calls in flight than
  // that (a client that releases results while it multiplies) about one call in three created a
  // thread (strace on the H200: 1244 creations for 3312 multiplies) and paid for it in latency.
  const int min_pollers = std::max(1, absl::GetFlag(FLAGS_grpc_min_pollers));
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, min_pollers);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              std::max(min_pollers, absl::GetFlag(FLAGS_grpc_max_pollers)));
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
  const bool tls = !absl::GetFlag(FLAGS_tls_cert).empty();
  std::printf(
      "matserve: serving gRPC on %s:%d (%s, %s)\n", host.c_str(), port,
      tls ? (absl::GetFlag(FLAGS_tls_client_ca).empty() ? "TLS" : "mutual TLS") : "plaintext",
      auth->enabled() ? absl::StrCat(auth->size(), " bearer tokens").c_str() : "no authentication");
  std::printf("matserve: %d CPUs usable%s, %d copy threads\n", host_limits.cpus,
              host_limits.cpu_quota
                  ? absl::StrFormat(" (cgroup CPU limit %.2f)", *host_limits.cpu_quota).c_str()
                  : "",
              options.copy_threads);
  for (const DeviceDescription& d : devs) {
    std::printf("matserve: device %d memory budget %.2f GiB\n", d.index,
                static_cast<double>(d.memory_budget_bytes) / (1 << 30));
    if (d.budget_requested_bytes > 0) {
      std::printf(
          "matserve: WARNING: --memory_budget_bytes=%lld is more than 90%% of device %d's "
          "memory; clamped to %lld\n",
          static_cast<long long>(d.budget_requested_bytes), d.index,
          static_cast<long long>(d.memory_budget_bytes));
    }
  }
  if (!tls && !is_loopback(listen)) {
    std::printf(
        "matserve: WARNING: plaintext gRPC on a non-loopback address; use --tls_cert/"
        "--tls_key (and --auth_tokens_file) on shared networks (docs/security.md)\n");
  }
  if (keep_awake != nullptr) {
    const CpuKeepAwake::Stats k = keep_awake->stats();
    std::printf(
        "matserve: keeping %d CPUs awake for %d ms after each call while at most %d are in "
        "flight (%d at idle priority)\n",
        k.threads, absl::GetFlag(FLAGS_keep_cpus_awake_ms),
        absl::GetFlag(FLAGS_keep_cpus_awake_max_calls), k.idle_priority);
  }
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
  // Drain: the listener stays open, so requests still being received arrive and are refused
  // with UNAVAILABLE rather than cut off; handlers already running finish. Then gRPC's Shutdown
  // closes the listener and waits for what is left, within the same grace period.
  service.begin_drain();
  const absl::Time drain_start = absl::Now();
  const absl::Time deadline =
      drain_start + absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds));
  while (metrics.in_flight_count() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::printf("matserve: drained in %.0f ms (%.0f requests still running)\n",
              absl::ToDoubleMilliseconds(absl::Now() - drain_start), metrics.in_flight_count());
  std::fflush(stdout);
  server->Shutdown(absl::ToChronoTime(deadline));
  server->Wait();
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
      "matserve: GPU matrix-compute gRPC server (GEMM and transpose).\n"
      "  matserve [--listen=0.0.0.0:50051] [--backend=auto|cuda|cpu] ...\n"
      "See docs/ for the API, deployment and metrics.");
  absl::ParseCommandLine(argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::GetFlag(FLAGS_check_lock_order)
                                          ? absl::OnDeadlockCycle::kAbort
                                          : absl::OnDeadlockCycle::kIgnore);
  return matserve::server::run();
}
