// Flags -> ServerConfig (see config.h): every flag of the server is defined here.
#include "server/config.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/runtime/host_limits.h"
#include "server/runtime/replica_handle.h"
#include "server/service/limits.h"
#include "server/service/tls_files.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "gRPC address (host:port; port 0 picks a free one)");
ABSL_FLAG(std::string, replica_id, "",
          "this replica's name, put in every resident handle it makes so that clients naming "
          "several replicas send calls on a handle to the replica holding it (1 to 48 of "
          "[A-Za-z0-9._:-]; empty: <hostname>:<gRPC port>, e.g. the pod's name in Kubernetes)");
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
ABSL_FLAG(bool, gate_launches, false,
          "CUDA: each call's device work starts behind a one-thread kernel that waits (at most "
          "1 ms) until the host has enqueued all of it, so timing.kernel_us holds no wait for "
          "the host's launch (as a benchmark that holds the stream busy measures it); costs a "
          "call about 6 us of latency. Work that cannot be captured in a CUDA graph (split over "
          "GPUs, out of core, fp8 scales read back) is not gated. For measurements; off by "
          "default");
ABSL_FLAG(int64_t, pinned_message_bytes, int64_t{1} << 30,
          "CUDA: pinned host memory in which large request and reply buffers are placed as gRPC "
          "parses and sends them, so they reach the GPU by DMA with no staging copy (blocks that "
          "do not fit are staged as usual; 0: none)");
ABSL_FLAG(bool, split_gemm, true,
          "CUDA, several GPUs: spread one large product over every GPU free at the time (C cut "
          "into bands, one a GPU; operands copied between GPUs); false: one product, one GPU");
ABSL_FLAG(double, split_gemm_min_flops, 1e13,
          "CUDA: products of fewer flops (2*m*n*k) run on one GPU unless the request asks for "
          "split=SPLIT_ALWAYS");
ABSL_FLAG(int64_t, split_gemm_tile, 4096,
          "CUDA: rows and columns at most of the tiles a helper GPU computes its band in (smaller: "
          "its first tile starts sooner; larger: each tile runs closer to the GPU's peak)");
ABSL_FLAG(int64_t, max_host_matrix_bytes, -1,
          "CUDA: pinned host memory for resident matrices larger than a third of the device "
          "budget, which products then read out of core (streamed to the GPU in tiles); -1: a "
          "quarter of the process's memory limit (host or cgroup); 0: none, such matrices are "
          "refused");
ABSL_FLAG(int64_t, out_of_core_tile, 8192,
          "CUDA: rows and columns at most of the tiles a product whose operands or result are "
          "in host memory is computed in (smaller ones when the budget asks)");
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
ABSL_FLAG(bool, shared_memory_allow_other_uids, false,
          "accept shared-memory objects owned by users other than the server's own (st_uid): "
          "off, RegisterSharedMemory refuses them with PERMISSION_DENIED");
ABSL_FLAG(int, max_shm_regions_per_owner, 64,
          "shared-memory regions one caller (token) may have registered at once");
ABSL_FLAG(int64_t, max_shared_memory_bytes_per_owner, int64_t{64} << 30,
          "bytes of shared-memory regions one caller (token) may have registered at once: the "
          "server maps them (and the CUDA backend pins them)");
ABSL_FLAG(int64_t, max_shared_memory_bytes, int64_t{256} << 30,
          "bytes of shared-memory regions all callers together may have registered at once");
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

absl::StatusOr<std::vector<std::pair<std::string, int>>> grpc_channel_args() {
  std::vector<std::pair<std::string, int>> out;
  for (absl::string_view arg :
       absl::StrSplit(absl::GetFlag(FLAGS_grpc_channel_args), ',', absl::SkipEmpty())) {
    const std::size_t eq = arg.find('=');
    int value = 0;
    if (eq == absl::string_view::npos || eq == 0 || !absl::SimpleAtoi(arg.substr(eq + 1), &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("grpc_channel_args: '", std::string(arg), "' is not NAME=INTEGER"));
    }
    out.emplace_back(std::string(arg.substr(0, eq)), value);
  }
  return out;
}

absl::StatusOr<BackendOptions> backend_options() {
  BackendOptions options;
  options.backend = absl::GetFlag(FLAGS_backend);
  absl::StatusOr<std::vector<int>> devices = parse_devices(absl::GetFlag(FLAGS_devices));
  if (!devices.ok()) return devices.status();
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
    return absl::InvalidArgumentError("copy_threads: must be -1 or in [0, 64]");
  }
  if (const std::int64_t pinned = absl::GetFlag(FLAGS_pinned_message_bytes);
      pinned < 0 || pinned > (std::int64_t{1} << 40)) {
    return absl::InvalidArgumentError("pinned_message_bytes: must be in [0, 2^40]");
  } else {
    options.pinned_message_bytes = static_cast<std::size_t>(pinned);
  }
  options.launch_graphs_per_stream = absl::GetFlag(FLAGS_launch_graphs_per_stream);
  if (options.launch_graphs_per_stream < 0 || options.launch_graphs_per_stream > 4096) {
    return absl::InvalidArgumentError("launch_graphs_per_stream: must be in [0, 4096]");
  }
  options.gate_launches = absl::GetFlag(FLAGS_gate_launches);
  options.split.enabled = absl::GetFlag(FLAGS_split_gemm);
  options.split.min_flops = absl::GetFlag(FLAGS_split_gemm_min_flops);
  if (!(options.split.min_flops >= 0)) {
    return absl::InvalidArgumentError("split_gemm_min_flops: must be >= 0");
  }
  options.split.tile = absl::GetFlag(FLAGS_split_gemm_tile);
  if (options.split.tile < 256 || options.split.tile > 65536) {
    return absl::InvalidArgumentError("split_gemm_tile: must be in [256, 65536]");
  }
  options.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget_bytes);
  options.max_host_matrix_bytes = absl::GetFlag(FLAGS_max_host_matrix_bytes);
  if (options.max_host_matrix_bytes == -1) {
    options.max_host_matrix_bytes = host_limits.memory_bytes / 4;
  } else if (options.max_host_matrix_bytes < 0) {
    return absl::InvalidArgumentError("max_host_matrix_bytes: must be -1, 0 or more");
  }
  options.out_of_core_tile = absl::GetFlag(FLAGS_out_of_core_tile);
  if (options.out_of_core_tile < 64 || options.out_of_core_tile > 65536) {
    return absl::InvalidArgumentError("out_of_core_tile: must be in [64, 65536]");
  }
  options.host = host_limits;
  options.max_queue = absl::GetFlag(FLAGS_max_queue_per_device);
  return options;
}

}  // namespace

absl::StatusOr<ServerConfig> config_from_flags() {
  ServerConfig c;
  c.listen = absl::GetFlag(FLAGS_listen);
  c.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  c.replica_id = absl::GetFlag(FLAGS_replica_id);
  if (!c.replica_id.empty()) {
    if (absl::Status s = check_replica_id(c.replica_id); !s.ok()) return s;
  }
  ServiceLimits& limits = c.limits;
  limits.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  limits.max_dimension = absl::GetFlag(FLAGS_max_dimension);
  limits.max_matrix_bytes = absl::GetFlag(FLAGS_max_matrix_bytes);
  limits.max_resident_bytes_per_owner = absl::GetFlag(FLAGS_max_resident_bytes_per_owner);
  limits.max_verify_flops = absl::GetFlag(FLAGS_max_verify_flops);
  limits.max_verify_bytes = absl::GetFlag(FLAGS_max_verify_bytes);
  limits.stream_idle_timeout_seconds = absl::GetFlag(FLAGS_stream_idle_timeout_seconds);
  limits.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  limits.shared_memory_allow_other_uids = absl::GetFlag(FLAGS_shared_memory_allow_other_uids);
  limits.max_shm_regions_per_owner = absl::GetFlag(FLAGS_max_shm_regions_per_owner);
  limits.max_shared_memory_bytes_per_owner = absl::GetFlag(FLAGS_max_shared_memory_bytes_per_owner);
  limits.max_shared_memory_bytes = absl::GetFlag(FLAGS_max_shared_memory_bytes);
  limits.max_batch_products = absl::GetFlag(FLAGS_max_batch_products);
  limits.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  limits.max_batch_delay_us = absl::GetFlag(FLAGS_max_batch_delay_us);
  absl::StatusOr<Authenticator> auth = Authenticator::from_sources(
      absl::GetFlag(FLAGS_auth_tokens_file), std::getenv("MATSERVE_AUTH_TOKENS"));
  if (!auth.ok()) return auth.status();
  c.auth = *std::move(auth);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = server_credentials();
  if (!credentials.ok()) return credentials.status();
  c.credentials = *std::move(credentials);
  c.tls = !absl::GetFlag(FLAGS_tls_cert).empty();
  c.mutual_tls = c.tls && !absl::GetFlag(FLAGS_tls_client_ca).empty();
  if (absl::Status s = check_limits(limits); !s.ok()) return s;  // service/limits.h
  absl::StatusOr<std::vector<std::pair<std::string, int>>> args = grpc_channel_args();
  if (!args.ok()) return args.status();
  c.grpc_args = *std::move(args);
  absl::StatusOr<BackendOptions> backend = backend_options();
  if (!backend.ok()) return backend.status();
  c.backend = *std::move(backend);
  c.autotune_table = absl::GetFlag(FLAGS_autotune_table);
  c.resident_ttl = absl::Seconds(absl::GetFlag(FLAGS_resident_ttl_seconds));
  c.keep_cpus_awake_ms = absl::GetFlag(FLAGS_keep_cpus_awake_ms);
  if (c.keep_cpus_awake_ms < 0 || c.keep_cpus_awake_ms > 60000) {
    return absl::InvalidArgumentError("keep_cpus_awake_ms: must be in [0, 60000]");
  }
  c.keep_cpus_awake_max_calls = absl::GetFlag(FLAGS_keep_cpus_awake_max_calls);
  if (c.keep_cpus_awake_ms > 0 && c.keep_cpus_awake_max_calls < 1) {
    return absl::InvalidArgumentError("keep_cpus_awake_max_calls: must be >= 1");
  }
  c.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  // gRPC's sync server keeps 1-2 polling threads by default: with more calls in flight than
  // that (a client that releases results while it multiplies) about one call in three created a
  // thread (strace on the H200: 1244 creations for 3312 multiplies) and paid for it in latency.
  c.grpc_min_pollers = std::max(1, absl::GetFlag(FLAGS_grpc_min_pollers));
  c.grpc_max_pollers = std::max(c.grpc_min_pollers, absl::GetFlag(FLAGS_grpc_max_pollers));
  c.shutdown_grace_seconds = absl::GetFlag(FLAGS_shutdown_grace_seconds);
  return c;
}

bool lock_order_checks_requested() {
  return absl::GetFlag(FLAGS_check_lock_order);
}

}  // namespace matserve::server
