// matserve-bench's statistics and option parsing: nearest-rank percentiles on known data, merging
// per-worker recorders (counts, samples, errors by code, dynamic batching), the derived figures and
// their renderings (matrices/s, merged requests), the concurrency/shape sweep syntax and --batch.
#include "client/bench/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "client/bench/options.h"
#include "client/bench/report.h"

namespace matserve::client::bench {
namespace {

TEST(NearestRank, KnownValuesOneToHundred) {
  std::vector<double> v(100);
  std::iota(v.begin(), v.end(), 1.0);  // 1..100
  EXPECT_EQ(nearest_rank(v, 50), 50);
  EXPECT_EQ(nearest_rank(v, 90), 90);
  EXPECT_EQ(nearest_rank(v, 99), 99);
  EXPECT_EQ(nearest_rank(v, 99.5), 100);
  EXPECT_EQ(nearest_rank(v, 100), 100);
  EXPECT_EQ(nearest_rank(v, 0), 1);
}

TEST(NearestRank, SmallCountsPickASampleNeverInterpolate) {
  const std::vector<double> five = {10, 20, 30, 40, 50};
  EXPECT_EQ(nearest_rank(five, 50), 30);  // ceil(2.5) = 3rd
  EXPECT_EQ(nearest_rank(five, 90), 50);  // ceil(4.5) = 5th
  EXPECT_EQ(nearest_rank(five, 20), 10);  // ceil(1.0) = 1st
  EXPECT_EQ(nearest_rank(five, 21), 20);
  EXPECT_EQ(nearest_rank({7}, 99), 7);
  EXPECT_EQ(nearest_rank({}, 50), 0);
  const std::vector<double> two = {1, 2};
  EXPECT_EQ(nearest_rank(two, 50), 1);
}

TEST(Summarize, SortsAndOrdersPercentiles) {
  std::mt19937_64 rng(3);
  std::exponential_distribution<double> dist(1e-3);
  std::vector<double> v(10007);
  for (double& x : v) x = dist(rng);
  const double sum = std::accumulate(v.begin(), v.end(), 0.0);
  const Summary s = summarize(v);
  EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
  EXPECT_EQ(s.count, 10007);
  EXPECT_EQ(s.min, v.front());
  EXPECT_EQ(s.max, v.back());
  EXPECT_NEAR(s.mean, sum / 10007, 1e-9 * sum);
  EXPECT_LE(s.min, s.p50);
  EXPECT_LE(s.p50, s.p90);
  EXPECT_LE(s.p90, s.p95);
  EXPECT_LE(s.p95, s.p99);
  EXPECT_LE(s.p99, s.max);
  EXPECT_EQ(s.p99, v[static_cast<std::size_t>(std::ceil(0.99 * 10007)) - 1]);
}

TEST(Recorder, MergeEqualsRecordingEverythingInOne) {
  Recorder all, a, b;
  for (int i = 0; i < 50; ++i) {
    Recorder& r = i % 3 ? a : b;
    const double c = 100 + i, total = 80 + i, kernel = 50 + i / 2.0;
    r.record_ok(c, total, kernel, 1, 2, 3);
    all.record_ok(c, total, kernel, 1, 2, 3);
  }
  a.record_error("INVALID_ARGUMENT", "unknown variant 'nope'");
  a.record_error("INVALID_ARGUMENT", "again");
  b.record_error("UNAVAILABLE", "down");
  b.variants["cublas"] = 4;
  a.variants["cublas"] = 1;
  a.release_errors = 1;

  Recorder merged;
  merged.merge(a);
  merged.merge(b);
  EXPECT_EQ(merged.ok(), 50);
  EXPECT_EQ(merged.errors(), 3);
  EXPECT_EQ(merged.requests(), 53);
  EXPECT_EQ(merged.errors_by_code.at("INVALID_ARGUMENT"), 2);
  EXPECT_EQ(merged.errors_by_code.at("UNAVAILABLE"), 1);
  EXPECT_EQ(merged.variants.at("cublas"), 5);
  EXPECT_EQ(merged.release_errors, 1);
  EXPECT_EQ(merged.first_error, "INVALID_ARGUMENT: unknown variant 'nope'");
  EXPECT_DOUBLE_EQ(merged.kernel_us_sum, all.kernel_us_sum);
  Summary m = summarize(merged.client_us), w = summarize(all.client_us);
  EXPECT_EQ(m.p50, w.p50);
  EXPECT_EQ(m.p99, w.p99);
  EXPECT_EQ(m.max, w.max);
  Summary o = summarize(merged.overhead_us);
  EXPECT_GE(o.min, 0);
  EXPECT_EQ(o.count, 50);
}

TEST(Recorder, MergedRequestsShareTheirLaunchsKernelTime) {
  Recorder r;
  r.record_ok(100, 80, 40, 10, 0, 0, 4, 6.5);  // one of 4 requests computed by one 40 us launch
  r.record_ok(100, 80, 40, 10, 0, 0, 1, 0);    // alone
  r.record_ok(100, 80, 40, 10, 0, 0);          // the server reported nothing (older server)
  EXPECT_EQ(r.merged_requests, (std::vector<double>{4, 1}));
  EXPECT_EQ(r.batch_wait_us, (std::vector<double>{6.5, 0}));
  EXPECT_DOUBLE_EQ(r.kernel_us_sum, 10 + 40 + 40);
  EXPECT_EQ(r.kernel_us, (std::vector<double>{40, 40, 40}));  // as the replies said
  Recorder merged;
  merged.merge(r);
  merged.merge(r);
  EXPECT_EQ(merged.merged_requests.size(), 4u);
  EXPECT_EQ(merged.batch_wait_us.size(), 4u);
  EXPECT_DOUBLE_EQ(merged.kernel_us_sum, 180);
}

TEST(Report, DerivedFiguresAndCountsAddUp) {
  RunResult result;
  result.spec = {{256, 256, 256}, Mode::kInline, "auto", "fp32", 4};
  result.wall_s = 2.0;
  result.bytes_sent_per_request = 2 * 256 * 256 * 4;
  for (int i = 0; i < 100; ++i) result.record.record_ok(200, 100, 40, 1, 10, 5);
  result.record.record_error("RESOURCE_EXHAUSTED", "busy");
  const RunReport r = make_report(result, 2);
  EXPECT_EQ(r.requests, 101);
  EXPECT_EQ(r.ok + r.errors, r.requests);
  EXPECT_DOUBLE_EQ(r.requests_per_s, 50.5);
  EXPECT_DOUBLE_EQ(r.overhead_us.p50, 60);
  EXPECT_DOUBLE_EQ(r.h2d_gb_per_s, 524288.0 / 10e3);  // bytes / (10 us) in GB/s
  EXPECT_DOUBLE_EQ(r.device_busy, 100 * 40e-6 / (2.0 * 2));
}

TEST(Report, BatchCountsProductsAndMergedRequests) {
  RunResult result;
  result.spec = {{64, 32, 16}, Mode::kResident, "auto", "fp32", 2, 8};
  result.wall_s = 4.0;
  for (int i = 0; i < 100; ++i) result.record.record_ok(200, 100, 40, 1, 0, 0, i % 2 ? 3 : 1, 5);
  result.record.record_error("UNAVAILABLE", "gone");
  const RunReport r = make_report(result, 1);
  EXPECT_DOUBLE_EQ(r.requests_per_s, 101 / 4.0);
  EXPECT_DOUBLE_EQ(r.ok_per_s, 25);
  EXPECT_DOUBLE_EQ(r.matrices_per_s, 25 * 8);  // only successful requests computed products
  EXPECT_DOUBLE_EQ(r.gflops_per_s, 25 * 8 * 2.0 * 64 * 32 * 16 / 1e9);
  EXPECT_DOUBLE_EQ(r.merged_requests.mean, 2.0);
  EXPECT_EQ(r.merged_requests.max, 3);
  EXPECT_EQ(r.batch_wait_us.p50, 5);
  // Ping computes nothing and reports no batching.
  RunResult ping;
  ping.spec = {{0, 0, 0}, Mode::kPing, "-", "-", 1};
  ping.wall_s = 1;
  ping.record.record_ok(50, 0, 0, 0, 0, 0);
  const RunReport p = make_report(ping, 1);
  EXPECT_EQ(p.matrices_per_s, 0);
  EXPECT_EQ(p.merged_requests.count, 0);

  std::ostringstream table, csv, json;
  print_table(table, {r, p});
  EXPECT_NE(table.str().find("| batch |"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("| req/s | matrices/s | merged |"), std::string::npos);
  EXPECT_NE(table.str().find("|     8 |      101 |"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("| 25.25 |        200 |   2.00 |"), std::string::npos);
  EXPECT_NE(table.str().find("|          - |      - |"), std::string::npos);  // the ping row
  write_csv(csv, {r});
  std::string header, row;
  std::istringstream lines(csv.str());
  std::getline(lines, header);
  std::getline(lines, row);
  EXPECT_NE(header.find(",batch,matrices_per_s,merged_requests_mean,batch_wait_p50_us"),
            std::string::npos);
  EXPECT_NE(row.rfind(",8,200,2,5"), std::string::npos) << row;
  write_json(json, {r, p}, ServerDescription{}, "bench --batch 8", "shared");
  EXPECT_NE(json.str().find("\"concurrency\": 2, \"batch\": 8,"), std::string::npos) << json.str();
  EXPECT_NE(json.str().find("\"matrices_per_s\": 200, \"merged_requests_mean\": 2,"),
            std::string::npos);
  EXPECT_NE(json.str().find("\"matrices_per_s\": 0, \"merged_requests_mean\": null,"),
            std::string::npos);
  EXPECT_NE(json.str().find("\"batch_wait_us\": {\"count\": 100,"), std::string::npos);
}

TEST(Options, ConcurrencySweeps) {
  EXPECT_EQ(*parse_concurrency("1:64:x2"), (std::vector<int>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(*parse_concurrency("1,8,64"), (std::vector<int>{1, 8, 64}));
  EXPECT_EQ(*parse_concurrency("2:8:+3,100"), (std::vector<int>{2, 5, 8, 100}));
  EXPECT_EQ(*parse_concurrency("1:10:x3"), (std::vector<int>{1, 3, 9}));
  EXPECT_FALSE(parse_concurrency("0").ok());
  EXPECT_FALSE(parse_concurrency("8:1:x2").ok());
  EXPECT_FALSE(parse_concurrency("1:8:x1").ok());
  EXPECT_FALSE(parse_concurrency("1:8").ok());
  EXPECT_FALSE(parse_concurrency("").ok());
}

TEST(Options, MixAndStopConditions) {
  auto o = parse_options({"--shapes", "256x128x64,1024", "--modes=inline,resident", "--variants",
                          "auto,cublas", "--compute", "fp32,tf32", "--concurrency", "1:4:x2",
                          "--requests", "100", "--json", "x.json", "--no-progress"});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->shapes.size(), 2u);
  EXPECT_EQ(o->shapes[0].name(), "256x128x64");
  EXPECT_EQ(o->shapes[1].name(), "1024x1024x1024");
  EXPECT_EQ(o->modes.size(), 2u);
  EXPECT_EQ(o->variants, (std::vector<std::string>{"auto", "cublas"}));
  EXPECT_EQ(o->concurrency, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(*o->requests, 100);
  EXPECT_FALSE(o->duration_s.has_value());
  EXPECT_FALSE(o->progress);
  EXPECT_EQ(*parse_options({})->duration_s, 5.0);
  EXPECT_FALSE(parse_options({"--modes", "remote"}).ok());
  auto ping = parse_options({"--modes", "ping,resident"});
  ASSERT_TRUE(ping.ok()) << ping.status();
  EXPECT_EQ(ping->modes, (std::vector<Mode>{Mode::kPing, Mode::kResident}));
  EXPECT_STREQ(ModeName(Mode::kPing), "ping");
  auto transports = parse_options({"--transport", "grpc,shm"});
  ASSERT_TRUE(transports.ok()) << transports.status();
  EXPECT_EQ(transports->modes, (std::vector<Mode>{Mode::kInline, Mode::kShm}));
  EXPECT_EQ(parse_options({"--modes", "shm"})->modes, (std::vector<Mode>{Mode::kShm}));
  EXPECT_STREQ(ModeName(Mode::kShm), "shm");
  EXPECT_FALSE(parse_options({"--transport", "carrier-pigeon"}).ok());
  auto gpu = parse_options({"--transport", "cuda-ipc", "--cuda-device", "1"});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->modes, (std::vector<Mode>{Mode::kCudaIpc}));
  EXPECT_EQ(gpu->cuda_device, 1);
  EXPECT_STREQ(ModeName(Mode::kCudaIpc), "cuda-ipc");
  EXPECT_FALSE(parse_options({})->rate.has_value());  // closed loop by default
  auto open = parse_options({"--rate", "250.5", "--arrivals", "constant"});
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_DOUBLE_EQ(*open->rate, 250.5);
  EXPECT_FALSE(open->poisson_arrivals);
  EXPECT_TRUE(parse_options({"--rate", "10"})->poisson_arrivals);
  for (const char* bad : {"0", "-5", "fast", "inf"}) {
    EXPECT_FALSE(parse_options({"--rate", bad}).ok()) << bad;
  }
  EXPECT_FALSE(parse_options({"--arrivals", "bursty"}).ok());
  EXPECT_FALSE(parse_options({})->client.poll_replies);  // replies waited for asleep
  EXPECT_TRUE(parse_options({"--wait", "poll"})->client.poll_replies);
  EXPECT_FALSE(parse_options({"--wait", "block"})->client.poll_replies);
  EXPECT_EQ(parse_options({"--wait", "spin"}).status().message(),
            "--wait: 'spin' is not block or poll");
  auto secured = parse_options({"--token-file", "/t", "--tls-ca", "/ca.pem", "--tls-cert", "/c.pem",
                                "--tls-key", "/c.key", "--tls-server-name", "matserve.example"});
  ASSERT_TRUE(secured.ok()) << secured.status();
  EXPECT_EQ(secured->security.token_file, "/t");
  EXPECT_EQ(secured->security.tls_ca, "/ca.pem");
  EXPECT_EQ(secured->security.tls_cert, "/c.pem");
  EXPECT_EQ(secured->security.tls_key, "/c.key");
  EXPECT_EQ(secured->security.tls_server_name, "matserve.example");
  const auto cert_alone = parse_options({"--tls-ca", "/ca.pem", "--tls-cert", "/c.pem"});
  EXPECT_EQ(cert_alone.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cert_alone.status().message().find("--tls-cert and --tls-key go together"),
            std::string::npos)
      << cert_alone.status();
  EXPECT_FALSE(parse_options({"--tls-server-name", "x"}).ok());  // needs --tls-ca
  auto tuned = parse_options({"--channel-arg", "grpc.http2.max_frame_size=1048576",
                              "--channel-arg=grpc.http2.lookahead_bytes=65536"});
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_EQ(tuned->channel_args,
            (std::vector<std::pair<std::string, int>>{{"grpc.http2.max_frame_size", 1048576},
                                                      {"grpc.http2.lookahead_bytes", 65536}}));
  EXPECT_FALSE(parse_options({"--channel-arg", "grpc.x"}).ok());
  EXPECT_FALSE(parse_options({"--channel-arg", "=5"}).ok());
  EXPECT_FALSE(parse_options({"--channel-arg", "grpc.x=big"}).ok());
  using Release = BenchOptions::Release;
  EXPECT_EQ(parse_options({})->release, Release::kBackground);
  EXPECT_EQ(parse_options({"--release", "background"})->release, Release::kBackground);
  EXPECT_EQ(parse_options({"--release", "inline"})->release, Release::kInline);
  EXPECT_EQ(parse_options({"--release", "deferred"})->release, Release::kDeferred);
  EXPECT_EQ(parse_options({"--release", "next-call"})->release, Release::kNextCall);
  EXPECT_FALSE(parse_options({"--release", "never"}).ok());
  EXPECT_EQ(parse_options({"--compute", "fp8,bf16"})->compute,
            (std::vector<std::string>{"fp8", "bf16"}));
  EXPECT_TRUE(parse_options({"--compute", "fp8"})->warnings.empty());
  EXPECT_EQ(parse_options({})->compute, std::vector<std::string>{"fp32"});
  EXPECT_FALSE(parse_options({"--compute", "fp4"}).ok());
  EXPECT_FALSE(parse_options({"--compute", ","}).ok());
  // --precisions, the former name: the same list, and a warning for stderr.
  auto old = parse_options({"--precisions=fp16,tf32"});
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->compute, (std::vector<std::string>{"fp16", "tf32"}));
  ASSERT_EQ(old->warnings.size(), 1u);
  EXPECT_EQ(old->warnings[0], "--precisions is deprecated: the same list is --compute");
  EXPECT_EQ(parse_options({"--precisions", "fp4"}).status().message(),
            "--precisions: 'fp4' is not fp64, fp32, tf32, fp16, bf16 or fp8");
  EXPECT_FALSE(parse_options({"--duration", "0"}).ok());
  EXPECT_FALSE(parse_options({"--bogus", "1"}).ok());
  EXPECT_FALSE(parse_options({"--requests"}).ok());
}

TEST(Options, BatchProductsPerRequest) {
  EXPECT_EQ(parse_options({})->batch, 1);
  auto o = parse_options({"--batch", "16", "--modes", "ping,inline,resident"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->batch, 16);
  EXPECT_EQ(parse_options({"--batch=4"})->batch, 4);
  for (const char* bad : {"0", "-2", "many", ""}) {
    auto refused = parse_options({"--batch", bad});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.status().message(),
              std::string("--batch: expected an integer >= 1, got '") + bad + "'");
  }
  EXPECT_EQ(parse_options({"--batch"}).status().message(), "--batch: missing value");
  // MultiplyBatched takes its operands inline or resident: shm and cuda-ipc refuse a batch.
  for (const char* mode : {"shm", "cuda-ipc"}) {
    auto refused = parse_options({"--transport", std::string("grpc,") + mode, "--batch", "2"});
    ASSERT_FALSE(refused.ok()) << mode;
    EXPECT_EQ(refused.status().message(),
              "--batch: 2 products per request need the inline or resident mode, not " +
                  std::string(mode));
  }
  EXPECT_TRUE(parse_options({"--transport", "shm", "--batch", "1"}).ok());
}

TEST(Report, JsonEscape) {
  EXPECT_EQ(json_escape("a\"b\\c\nd\x01"), "a\\\"b\\\\c\\nd\\u0001");
}

}  // namespace
}  // namespace matserve::client::bench
