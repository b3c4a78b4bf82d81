// The server process's lifecycle around the gRPC server: shutdown signals, health that follows
// the devices, the start-up banner, and the graceful drain. main.cc wires the pieces from the
// checked configuration (config.h); nothing here reads flags.
#pragma once

#include <pthread.h>

#include <csignal>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace grpc {
class HealthCheckServiceInterface;
class Server;
}  // namespace grpc

namespace matserve::server {

class Backend;
class CpuKeepAwake;
class MatrixServiceImpl;
class Metrics;
class Runtime;
struct ServerConfig;

// SIGTERM and SIGINT, blocked in the calling thread and every thread it starts afterwards, so
// that wait() alone takes them. Threads started before (a BLAS library's workers start when it
// is loaded, before main) still accept them: a handler forwards any that lands there to the
// constructing thread, where it waits for wait(), instead of the default action killing the
// process mid-drain. Construct on the thread that calls wait(), before it starts others; one
// instance per process.
class ShutdownSignals {
 public:
  ShutdownSignals();
  // Blocks until one arrives; its name ("SIGTERM" or "SIGINT").
  const char* wait() const;

 private:
  static void forward(int signal_number);
  static pthread_t waiter_;  // set once, before the handler is installed
  sigset_t set_{};
};

// Marks the whole server and `service` SERVING or NOT_SERVING in gRPC's health service.
void set_serving(grpc::HealthCheckServiceInterface& health, const std::string& service,
                 bool serving);

// Polls the backend's health every 250 ms on a thread of its own and follows it in the health
// service (a sticky CUDA error takes the replica out of rotation), until destroyed.
class HealthWatch {
 public:
  HealthWatch(const Backend& backend, grpc::HealthCheckServiceInterface& health,
              std::string service);
  ~HealthWatch();
  HealthWatch(const HealthWatch&) = delete;
  HealthWatch& operator=(const HealthWatch&) = delete;

 private:
  absl::Notification stopping_;
  std::thread thread_;
};

// What the server says once it serves: version, backend and devices, address and security, CPUs,
// memory budgets, warnings, keep-awake, metrics address. `keep_awake` may be null; a
// `metrics_port` of 0 means no metrics endpoint.
void print_banner(const ServerConfig& config, const Runtime& runtime, int port, int metrics_port,
                  const CpuKeepAwake* keep_awake);

// The graceful stop: health NOT_SERVING, new calls refused with UNAVAILABLE while the listener
// stays open (requests in transmission get that answer instead of a reset), running calls finish
// within `grace`; the connections stay open up to a second more for replies still on the way;
// then gRPC's Shutdown closes the listener and waits for what is left within the same deadline.
void drain_and_stop(grpc::Server& server, grpc::HealthCheckServiceInterface& health,
                    const std::string& service, MatrixServiceImpl& matrix_service,
                    const Metrics& metrics, absl::Duration grace);

}  // namespace matserve::server
