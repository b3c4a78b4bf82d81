// Serves GET /metrics over HTTP from threads with default-size stacks (cpp-httplib), instead of
// prometheus-cpp's civetweb Exposer, whose small thread stacks cannot hold cuBLAS's static TLS
// (see shared/notes/traps.md): the endpoint works in a binary that links cuBLAS.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace matserve::server {

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;

  // Binds `address` ("host:port"; port 0 picks a free one) and serves in a background thread.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> start(const std::string& address,
                                                                  Render render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace matserve::server
