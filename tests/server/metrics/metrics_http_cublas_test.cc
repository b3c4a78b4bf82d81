// /metrics works in a binary that links (and loads) cuBLAS, as the server does: the httplib
// endpoint serves from threads with default stacks, which hold cuBLASLt's large static TLS.
// Negative control: prometheus-cpp's civetweb Exposer cannot start in this same binary
// (pthread_create fails with EINVAL for its small thread stacks; shared/notes/traps.md).
#include <cublasLt.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>

#include "prometheus/exposer.h"
#include "server/metrics/metrics.h"
#include "server/metrics/metrics_http.h"

namespace matserve::server {
namespace {

TEST(MetricsHttpCublasTest, CublasLtIsLoadedInThisBinary) {
  // Resolving and calling a cuBLASLt function proves the library (and its TLS) is in the image;
  // it needs no GPU.
  EXPECT_GT(cublasLtGetVersion(), 0u);
}

TEST(MetricsHttpCublasTest, ServesMetricsOverHttp) {
  ASSERT_GT(cublasLtGetVersion(), 0u);
  Metrics metrics(BuildInfo{"1.2.3", "abc", "13.0", "cuda"});
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::start("127.0.0.1:0", [&metrics] { return metrics.scrape(); });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  for (int i = 0; i < 3; ++i) {  // several scrapes, each on a server thread
    const httplib::Result res = client.Get("/metrics");
    ASSERT_TRUE(res) << "GET /metrics failed: " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->body.find("matserve_build_info{"), std::string::npos) << res->body;
    EXPECT_NE(res->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  }
}

TEST(MetricsHttpCublasTest, CivetwebExposerCannotStartOnceCublasIsLoaded) {
  ASSERT_GT(cublasLtGetVersion(), 0u);
  // The trap this module avoids: civetweb's worker threads get a stack too small for the static
  // TLS of libcublasLt, so the Exposer's constructor throws ("null context when constructing
  // CivetServer"). If this ever starts passing, the trap is gone, not the endpoint broken.
  EXPECT_ANY_THROW(prometheus::Exposer exposer("127.0.0.1:0"));
}

}  // namespace
}  // namespace matserve::server
