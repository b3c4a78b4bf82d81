// Shutdown signals, health watch, banner and drain of the server process (lifecycle.h).
#include "server/lifecycle.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "matserve/version.h"
#include "server/config.h"
#include "server/metrics/metrics.h"
#include "server/runtime/backend.h"
#include "server/runtime/cpu_keep_awake.h"
#include "server/runtime/host_limits.h"
#include "server/runtime/runtime.h"
#include "server/service/matrix_service.h"

namespace matserve::server {
namespace {

// How long connections stay open after the last request finished, so that clients read replies
// still on the way (drain_and_stop).
constexpr absl::Duration kReplyLinger = absl::Seconds(1);

bool is_loopback(const std::string& listen) {
  return listen.rfind("127.", 0) == 0 || listen.rfind("localhost:", 0) == 0 ||
         listen.rfind("[::1]:", 0) == 0 || listen.rfind("unix:", 0) == 0;
}

}  // namespace

pthread_t ShutdownSignals::waiter_;

ShutdownSignals::ShutdownSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  waiter_ = pthread_self();
  struct sigaction action = {};
  action.sa_handler = &ShutdownSignals::forward;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

// Runs only on a thread that has the signal unblocked; pthread_kill is async-signal-safe, and
// the waiter, which blocks the signal, finds it pending in sigwait.
void ShutdownSignals::forward(int signal_number) {
  pthread_kill(waiter_, signal_number);
}

const char* ShutdownSignals::wait() const {
  int signal_number = 0;
  sigwait(&set_, &signal_number);
  return signal_number == SIGTERM ? "SIGTERM" : "SIGINT";
}

void set_serving(grpc::HealthCheckServiceInterface& health, const std::string& service,
                 bool serving) {
  health.SetServingStatus(service, serving);
  health.SetServingStatus(serving);
}

HealthWatch::HealthWatch(const Backend& backend, grpc::HealthCheckServiceInterface& health,
                         std::string service)
    : thread_([this, &backend, &health, service = std::move(service)] {
        bool serving = true;
        while (!stopping_.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
          const bool now = backend.healthy();
          if (now != serving) {
            serving = now;
            set_serving(health, service, serving);
            std::fprintf(stderr, "matserve: health -> %s\n", serving ? "SERVING" : "NOT_SERVING");
          }
        }
      }) {}

HealthWatch::~HealthWatch() {
  stopping_.Notify();
  thread_.join();
}

void print_banner(const ServerConfig& c, const Runtime& runtime, int port, int metrics_port,
                  const CpuKeepAwake* keep_awake) {
  const std::vector<DeviceDescription> devs = runtime.backend().devices();
  std::printf("matserve %s (git %s, CUDA %s): backend %s on %s%s\n", kVersion, kGitSha,
              kCudaVersion, std::string(kernels::backend_name(runtime.backend().kind())).c_str(),
              devs.empty() ? "?" : devs[0].name.c_str(),
              devs.size() > 1 ? absl::StrCat(" and ", devs.size() - 1, " more").c_str() : "");
  const std::string& listen = c.listen;
  const std::string host = listen.substr(0, listen.rfind(':'));
  const bool tls = c.tls;
  std::printf("matserve: serving gRPC on %s:%d (%s, %s)\n", host.c_str(), port,
              tls ? (c.mutual_tls ? "mutual TLS" : "TLS") : "plaintext",
              c.auth.enabled() ? absl::StrCat(c.auth.size(), " bearer tokens").c_str()
                               : "no authentication");
  std::printf("matserve: replica id %s (in every resident handle)\n",
              runtime.residents().replica_id().c_str());
  const BackendOptions& options = c.backend;
  const HostLimits& host_limits = *options.host;
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
        k.threads, c.keep_cpus_awake_ms, c.keep_cpus_awake_max_calls, k.idle_priority);
  }
  if (metrics_port != 0) {
    const std::string& maddr = c.metrics_listen;
    std::printf("matserve: metrics on http://%s:%d/metrics\n",
                maddr.substr(0, maddr.rfind(':')).c_str(), metrics_port);
  }
  std::fflush(stdout);
}

void drain_and_stop(grpc::Server& server, grpc::HealthCheckServiceInterface& health,
                    const std::string& service, MatrixServiceImpl& matrix_service,
                    const Metrics& metrics, absl::Duration grace) {
  set_serving(health, service, false);
  matrix_service.begin_drain();
  const absl::Time drain_start = absl::Now();
  const absl::Time deadline = drain_start + grace;
  while (metrics.in_flight_count() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::printf("matserve: drained in %.0f ms (%.0f requests still running)\n",
              absl::ToDoubleMilliseconds(absl::Now() - drain_start), metrics.in_flight_count());
  std::fflush(stdout);
  // A handler that has returned may still have its reply on the way: gRPC writes it after the
  // handler, and a connection closed while the client is still reading it is reset (the client's
  // flow-control updates reach a closed socket, whose kernel then drops what it had not sent),
  // so the client loses a reply the server finished. The connections stay open a moment longer.
  const absl::Time linger_end = std::min(deadline, absl::Now() + kReplyLinger);
  absl::SleepFor(std::max(absl::ZeroDuration(), linger_end - absl::Now()));
  server.Shutdown(absl::ToChronoTime(deadline));
  server.Wait();
}

}  // namespace matserve::server
