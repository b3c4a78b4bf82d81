// Metrics module: what record() and the snapshot sources turn into, read back from the text
// exposition the endpoint serves (counts, stage histograms, kernel counters, runtime and GPU
// gauges), with NVML absent and with the fake NVML library.
#include "server/metrics/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/metrics/device_uuid.h"
#include "tests/server/metrics/scrape_parser.h"

namespace matserve::server {
namespace {

using testing::has_family;
using testing::sample_sum;

Metrics make_metrics() {
  return Metrics(BuildInfo{"1.2.3", "abc", "none", "cpu"});
}

RequestRecord gemm_ok(const std::string& variant, double kernel_us) {
  RequestRecord r{.rpc = "Multiply",
                  .op = "gemm",
                  .variant = variant,
                  .precision = "fp32",
                  .device = "cpu",
                  .code = "OK"};
  r.times = StageTimes{.queue_us = 10,
                       .host_to_device_us = 20,
                       .kernel_us = kernel_us,
                       .device_to_host_us = 30,
                       .total_us = 100 + kernel_us};
  r.work = 2.0 * 64 * 64 * 64;
  r.problem_size = 64.0 * 64 * 64;
  r.bytes_received = 1000;
  r.bytes_sent = 500;
  return r;
}

TEST(MetricsTest, CountsRequestsByRpcVariantAndCode) {
  Metrics m = make_metrics();
  m.record(gemm_ok("openblas", 50));
  m.record(gemm_ok("openblas", 70));
  RequestRecord bad{.rpc = "Multiply",
                    .op = "gemm",
                    .variant = "none",
                    .precision = "none",
                    .device = "none",
                    .code = "INVALID_ARGUMENT"};
  bad.bytes_received = 7;
  m.record(bad);
  const std::string text = m.scrape();
  EXPECT_EQ(sample_sum(text, "matserve_requests_total", {{"code", "OK"}, {"variant", "openblas"}}),
            2);
  EXPECT_EQ(sample_sum(text, "matserve_requests_total", {{"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_EQ(sample_sum(text, "matserve_received_bytes_total", {{"rpc", "Multiply"}}), 2007);
  EXPECT_EQ(sample_sum(text, "matserve_sent_bytes_total", {{"rpc", "Multiply"}}), 1000);
  EXPECT_EQ(sample_sum(text, "matserve_build_info", {{"version", "1.2.3"}, {"backend", "cpu"}}), 1);
}

// record() only queues; the background thread, a full queue and every scrape apply. Records made
// from many threads while scrapes run are each counted once, whichever applied them.
TEST(MetricsTest, RecordsFromManyThreadsAreEachCountedOnceWhileScrapesRun) {
  Metrics m = make_metrics();
  constexpr int kThreads = 4;
  constexpr int kEach = 3000;  // 12000 records: past the queue's bound several times
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < kEach; ++i) m.record(gemm_ok("openblas", 1));
    });
  }
  double seen = 0;
  for (int i = 0; i < 20; ++i) {
    // A scrape before the first record is applied has no such series yet (sample_sum: -1).
    const double now =
        std::max(0.0, sample_sum(m.scrape(), "matserve_requests_total", {{"variant", "openblas"}}));
    EXPECT_GE(now, seen);  // never goes back
    seen = now;
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(sample_sum(m.scrape(), "matserve_requests_total", {{"variant", "openblas"}}),
            kThreads * kEach);
  // And without a scrape: the background thread applies a record within its period.
  m.record(gemm_ok("late", 1));
  for (int i = 0; i < 1000 && m.queued_records() > 0; ++i) {  // up to 10 s on a loaded host
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(m.queued_records(), 0);
  EXPECT_EQ(sample_sum(m.scrape(), "matserve_requests_total", {{"variant", "late"}}), 1);
}

TEST(MetricsTest, StageHistogramsAddUpWithinTheTotal) {
  Metrics m = make_metrics();
  m.record(gemm_ok("openblas", 50));
  const std::string text = m.scrape();
  const auto stage_sum = [&](const char* stage) {
    return sample_sum(text, "matserve_request_duration_seconds_sum", {{"stage", stage}});
  };
  EXPECT_EQ(sample_sum(text, "matserve_request_duration_seconds_count", {{"stage", "total"}}), 1);
  EXPECT_DOUBLE_EQ(stage_sum("kernel"), 50e-6);
  EXPECT_DOUBLE_EQ(stage_sum("total"), 150e-6);
  EXPECT_LE(stage_sum("queue") + stage_sum("host_to_device") + stage_sum("kernel") +
                stage_sum("device_to_host"),
            stage_sum("total"));
  // 50 us lands in le=5e-05, not in le=4e-05 below it; 150 us (the total) in le=0.00015.
  EXPECT_EQ(sample_sum(text, "matserve_request_duration_seconds_bucket",
                       {{"stage", "kernel"}, {"le", "5e-05"}}),
            1);
  EXPECT_EQ(sample_sum(text, "matserve_request_duration_seconds_bucket",
                       {{"stage", "kernel"}, {"le", "4e-05"}}),
            0);
  EXPECT_EQ(sample_sum(text, "matserve_request_duration_seconds_bucket",
                       {{"stage", "total"}, {"le", "0.00015"}}),
            1);
}

TEST(MetricsTest, FailedRequestsObserveTheirTotalOnlyAndNoKernelWork) {
  Metrics m = make_metrics();
  RequestRecord bad{.rpc = "Transpose",
                    .op = "transpose",
                    .variant = "none",
                    .precision = "fp32",
                    .device = "none",
                    .code = "RESOURCE_EXHAUSTED"};
  bad.times.total_us = 30;
  m.record(bad);
  const std::string text = m.scrape();
  EXPECT_EQ(sample_sum(text, "matserve_requests_total", {{"code", "RESOURCE_EXHAUSTED"}}), 1);
  EXPECT_EQ(sample_sum(text, "matserve_request_duration_seconds_count",
                       {{"stage", "total"}, {"outcome", "error"}, {"device", "none"}}),
            1);
  EXPECT_DOUBLE_EQ(
      sample_sum(text, "matserve_request_duration_seconds_sum", {{"outcome", "error"}}), 30e-6);
  EXPECT_EQ(sample_sum(text, "matserve_request_duration_seconds_count", {{"outcome", "ok"}}), -1);
  EXPECT_EQ(sample_sum(text, "matserve_request_duration_seconds_count", {{"stage", "kernel"}}), -1);
  EXPECT_EQ(sample_sum(text, "matserve_kernel_seconds_total"), -1);
}

TEST(MetricsTest, ResidentRpcsObserveTheirTimeByRpcAndOutcome) {
  Metrics m = make_metrics();
  const auto resident = [](const std::string& rpc, const std::string& code, double total_us) {
    RequestRecord r{.rpc = rpc,
                    .op = "resident",
                    .variant = "none",
                    .precision = "none",
                    .device = "none",
                    .code = code};
    r.times.total_us = total_us;
    return r;
  };
  m.record(resident("WriteRange", "OK", 250));
  m.record(resident("WriteRange", "OK", 150));
  m.record(resident("WriteRange", "OUT_OF_RANGE", 10));
  m.record(resident("Release", "OK", 6));
  m.record(gemm_ok("openblas", 50));
  const std::string text = m.scrape();
  const std::string family = "matserve_resident_rpc_duration_seconds";
  EXPECT_EQ(sample_sum(text, family + "_count", {{"rpc", "WriteRange"}, {"outcome", "ok"}}), 2);
  EXPECT_DOUBLE_EQ(sample_sum(text, family + "_sum", {{"rpc", "WriteRange"}, {"outcome", "ok"}}),
                   400e-6);
  EXPECT_EQ(sample_sum(text, family + "_count", {{"rpc", "WriteRange"}, {"outcome", "error"}}), 1);
  EXPECT_DOUBLE_EQ(sample_sum(text, family + "_sum", {{"rpc", "Release"}}), 6e-6);
  // Compute RPCs keep their stages in matserve_request_duration_seconds only.
  EXPECT_EQ(sample_sum(text, family + "_count", {{"rpc", "Multiply"}}), -1);
  EXPECT_EQ(sample_sum(text, "matserve_request_duration_seconds_count", {{"stage", "total"}}), 1);
}

TEST(MetricsTest, KernelCountersGiveTheAchievedRate) {
  Metrics m = make_metrics();
  m.record(gemm_ok("openblas", 50));
  RequestRecord t{.rpc = "Transpose",
                  .op = "transpose",
                  .variant = "blocked",
                  .precision = "fp32",
                  .device = "cpu",
                  .code = "OK"};
  t.times.kernel_us = 4;
  t.work = 8000;  // bytes read + written
  m.record(t);
  const std::string text = m.scrape();
  const double flops = sample_sum(text, "matserve_kernel_flops_total", {{"variant", "openblas"}});
  const double seconds = sample_sum(text, "matserve_kernel_seconds_total", {{"op", "gemm"}});
  EXPECT_DOUBLE_EQ(flops, 2.0 * 64 * 64 * 64);
  EXPECT_NEAR(flops / seconds / 1e9, 2.0 * 64 * 64 * 64 / 50e-6 / 1e9, 1e-6);
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_kernel_bytes_total", {{"variant", "blocked"}}), 8000);
  EXPECT_EQ(sample_sum(text, "matserve_problem_size_elements_count", {{"op", "gemm"}}), 1);
}

TEST(MetricsTest, RuntimeSnapshotIsReadAtEveryScrape) {
  Metrics m = make_metrics();
  int queued = 3;
  m.set_runtime_source([&queued] {
    DeviceStats d;
    d.label = "cuda:0";
    d.scheduler.slots = 4;
    d.scheduler.running = 2;
    d.scheduler.queued = queued;
    d.scheduler.rejected_queue = 5;
    d.pool.budget_bytes = 1000;
    d.pool.in_use_bytes = 300;
    d.pool.long_lived_bytes = 100;
    d.pool.cached_bytes = 200;
    d.pool.hits = 9;
    d.pool.misses = 1;
    d.staging_pinned_bytes = 64;
    RuntimeSnapshot snapshot{{d}, ResidentStats{.count = 2, .bytes = 100, .expired_total = 1}};
    snapshot.message_heap = PinnedHeapStats{
        .capacity_bytes = 4096, .in_use_bytes = 512, .allocations = 7, .fallbacks = 2};
    snapshot.keep_awake = CpuKeepAwake::Stats{.threads = 16, .spinning = 11, .parked = 5};
    snapshot.host_matrices =
        PoolStats{.budget_bytes = 8192, .in_use_bytes = 4096, .cached_bytes = 1024};
    return snapshot;
  });
  std::string text = m.scrape();
  const std::map<std::string, std::string> dev = {{"device", "cuda:0"}};
  EXPECT_EQ(sample_sum(text, "matserve_queue_depth", dev), 3);
  EXPECT_EQ(sample_sum(text, "matserve_execution_slots", dev), 4);
  EXPECT_EQ(sample_sum(text, "matserve_execution_slots_in_use", dev), 2);
  EXPECT_EQ(sample_sum(text, "matserve_admission_rejections_total", {{"reason", "queue_full"}}), 5);
  EXPECT_EQ(sample_sum(text, "matserve_device_pool_bytes", {{"state", "in_use"}}), 300);
  EXPECT_EQ(sample_sum(text, "matserve_device_pool_bytes", {{"state", "cached"}}), 200);
  EXPECT_EQ(sample_sum(text, "matserve_device_pool_allocations_total", {{"result", "miss"}}), 1);
  EXPECT_EQ(sample_sum(text, "matserve_device_pool_resident_bytes", dev), 100);
  EXPECT_EQ(sample_sum(text, "matserve_staging_pinned_bytes", dev), 64);
  EXPECT_EQ(sample_sum(text, "matserve_resident_matrices"), 2);
  EXPECT_EQ(sample_sum(text, "matserve_resident_expired_total"), 1);
  EXPECT_EQ(sample_sum(text, "matserve_pinned_message_bytes", {{"state", "capacity"}}), 4096);
  EXPECT_EQ(sample_sum(text, "matserve_pinned_message_bytes", {{"state", "in_use"}}), 512);
  EXPECT_EQ(sample_sum(text, "matserve_pinned_message_allocations_total", {{"result", "pinned"}}),
            7);
  EXPECT_EQ(sample_sum(text, "matserve_pinned_message_allocations_total", {{"result", "fallback"}}),
            2);
  EXPECT_EQ(sample_sum(text, "matserve_keep_awake_threads", {{"state", "spinning"}}), 11);
  EXPECT_EQ(sample_sum(text, "matserve_keep_awake_threads", {{"state", "parked"}}), 5);
  EXPECT_EQ(sample_sum(text, "matserve_host_matrix_bytes", {{"state", "in_use"}}), 4096);
  EXPECT_EQ(sample_sum(text, "matserve_host_matrix_bytes", {{"state", "cached"}}), 1024);
  EXPECT_EQ(sample_sum(text, "matserve_host_matrix_bytes", {{"state", "budget"}}), 8192);
  queued = 0;
  text = m.scrape();
  EXPECT_EQ(sample_sum(text, "matserve_queue_depth", dev), 0);
}

TEST(MetricsTest, NoRuntimeSourceAndNoNvmlExportNeither) {
  Metrics m = make_metrics();
  m.set_gpu_source(Nvml::load("/nonexistent/libnvidia-ml.so.1"), {});
  const std::string text = m.scrape();
  EXPECT_FALSE(has_family(text, "matserve_queue_depth"));
  EXPECT_FALSE(has_family(text, "matserve_resident_matrices"));
  EXPECT_FALSE(has_family(text, "matserve_pinned_message_bytes"));
  EXPECT_FALSE(has_family(text, "matserve_host_matrix_bytes"));
  EXPECT_FALSE(has_family(text, "matserve_keep_awake_threads"));
  EXPECT_EQ(text.find("matserve_gpu_"), std::string::npos);
}

TEST(NvmlTest, MissingLibraryGivesNull) {
  EXPECT_EQ(Nvml::load("/nonexistent/libnvidia-ml.so.1"), nullptr);
}

TEST(NvmlTest, FakeLibraryGivesLabelledGpuGauges) {
  std::unique_ptr<Nvml> nvml = Nvml::load(MATSERVE_FAKE_NVML);
  ASSERT_NE(nvml, nullptr);
  Metrics m = make_metrics();
  m.set_gpu_source(std::move(nvml), {{"GPU-00000000-0000-0000-0000-000000000001", "cuda:0"}});
  std::string text = m.scrape();
  // GPU 1 is the server's cuda:0; GPU 0 is on the machine but unused by this server. Labels join
  // with dcgm-exporter's: gpu, UUID, model_name; the server's device is cuda_device.
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_utilization_ratio",
                              {{"gpu", "1"},
                               {"cuda_device", "cuda:0"},
                               {"UUID", "GPU-00000000-0000-0000-0000-000000000001"},
                               {"model_name", "NVIDIA H100 80GB HBM3"}}),
                   0.38);
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_utilization_ratio", {{"cuda_device", "unused"}}),
                   0.37);
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_memory_total_bytes", {{"gpu", "0"}}),
                   80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_power_watts", {{"gpu", "0"}}), 123.456);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_power_watts", {{"gpu", "1"}}), -1);  // unsupported
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_sm_clock_hertz", {{"gpu", "0"}}), 1755e6);
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_temperature_celsius", {{"gpu", "1"}}), 41);
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_power_limit_watts", {{"gpu", "1"}}), 700);
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_energy_joules_total", {{"gpu", "0"}}),
                   123456.789);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_energy_joules_total", {{"gpu", "1"}}), -1);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_ecc_corrected_errors_total", {{"gpu", "1"}}), 3);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_ecc_uncorrected_errors_total", {{"gpu", "1"}}), 0);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_clock_event_reason_active",
                       {{"gpu", "1"}, {"reason", "hw_thermal_slowdown"}}),
            1);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_clock_event_reason_active",
                       {{"gpu", "1"}, {"reason", "sw_power_cap"}}),
            1);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_clock_event_reason_active",
                       {{"gpu", "1"}, {"reason", "gpu_idle"}}),
            0);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_clock_event_reason_active",
                       {{"gpu", "0"}, {"reason", "gpu_idle"}}),
            1);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_healthy", {{"gpu", "0"}}), 1);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_healthy", {{"gpu", "1"}}), 0);  // thermal slowdown
  // The fake delivers one Xid 79 on GPU 1 to the event thread; it arrives within a few waits.
  for (int i = 0; i < 200 && sample_sum(text, "matserve_gpu_xid_errors_total", {{"gpu", "1"}}) < 1;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    text = m.scrape();
  }
  EXPECT_EQ(sample_sum(text, "matserve_gpu_xid_errors_total", {{"gpu", "1"}}), 1);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_last_xid", {{"gpu", "1"}}), 79);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_xid_errors_total", {{"gpu", "0"}}), 0);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_last_xid", {{"gpu", "0"}}), 0);
}

TEST(NvmlTest, DriverWithoutTheOptionalFunctionsLeavesTheirSeriesOut) {
  // An old driver: utilization, memory, temperature, power and clock only. The scrape works and
  // the series of the missing functions (and the Xid watcher's) are simply absent.
  std::unique_ptr<Nvml> nvml = Nvml::load(MATSERVE_FAKE_NVML_CORE_ONLY);
  ASSERT_NE(nvml, nullptr);
  Metrics m = make_metrics();
  m.set_gpu_source(std::move(nvml), {});
  const std::string text = m.scrape();
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_utilization_ratio", {{"gpu", "1"}}), 0.38);
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_gpu_power_watts", {{"gpu", "0"}}), 123.456);
  EXPECT_EQ(sample_sum(text, "matserve_gpu_healthy", {{"gpu", "0"}}), 1);
  for (const char* absent :
       {"matserve_gpu_energy_joules_total", "matserve_gpu_power_limit_watts",
        "matserve_gpu_clock_event_reason_active", "matserve_gpu_ecc_corrected_errors_total",
        "matserve_gpu_ecc_uncorrected_errors_total", "matserve_gpu_xid_errors_total",
        "matserve_gpu_last_xid"}) {
    EXPECT_FALSE(has_family(text, absent)) << absent;
  }
  EXPECT_EQ(text.find("model_name=\"NVIDIA"), std::string::npos);  // no nvmlDeviceGetName
}

TEST(MetricsTest, SeriesOfAGpuDeviceCarryItsUuid) {
  // Request and runtime series of a GPU device join with the GPU series and with DCGM's on UUID;
  // the CPU device has no UUID label.
  Metrics m = make_metrics();
  const std::string uuid = "GPU-00000000-0000-0000-0000-000000000001";
  m.set_gpu_source(nullptr, {{uuid, "cuda:0"}});
  m.set_runtime_source([] {
    DeviceStats gpu;
    gpu.label = "cuda:0";
    gpu.scheduler.queued = 2;
    DeviceStats cpu;
    cpu.label = "cpu";
    cpu.scheduler.queued = 5;
    return RuntimeSnapshot{{gpu, cpu}};
  });
  RequestRecord r = gemm_ok("tensor_core", 40);
  r.device = "cuda:0";
  r.launch_path = "graph_replayed";
  r.merged_requests = 2;
  m.record(r);
  m.record(gemm_ok("openblas", 50));
  const std::string text = m.scrape();
  const std::map<std::string, std::string> gpu = {{"device", "cuda:0"}, {"UUID", uuid}};
  EXPECT_EQ(sample_sum(text, "matserve_queue_depth", gpu), 2);
  EXPECT_EQ(sample_sum(text, "matserve_device_pool_bytes", gpu), 0);
  EXPECT_EQ(sample_sum(text, "matserve_requests_total", gpu), 1);
  EXPECT_EQ(sample_sum(text, "matserve_request_duration_seconds_count", gpu), 5);  // 5 stages
  EXPECT_DOUBLE_EQ(sample_sum(text, "matserve_kernel_seconds_total", gpu), 40e-6);
  EXPECT_EQ(sample_sum(text, "matserve_launches_total", gpu), 1);
  EXPECT_EQ(sample_sum(text, "matserve_batch_merged_requests_count", gpu), 1);
  EXPECT_EQ(sample_sum(text, "matserve_queue_depth", {{"device", "cpu"}}), 5);
  EXPECT_EQ(sample_sum(text, "matserve_requests_total", {{"device", "cpu"}}), 1);
  std::istringstream lines(text);
  int cpu_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("device=\"cpu\"") == std::string::npos) continue;
    ++cpu_lines;
    EXPECT_EQ(line.find("UUID="), std::string::npos) << line;
  }
  EXPECT_GT(cpu_lines, 10);
}

TEST(GpuHealthTest, EachTroubleMakesAGpuUnhealthy) {
  GpuReading g;
  EXPECT_TRUE(gpu_healthy(g));               // nothing NVML could read counts as no trouble
  g.clock_event_reasons = 0x1 | 0x4 | 0x20;  // idle, software power cap and thermal slowdown
  EXPECT_TRUE(gpu_healthy(g));
  for (std::uint64_t hw : {0x8, 0x40, 0x80}) {
    g.clock_event_reasons = hw;
    EXPECT_FALSE(gpu_healthy(g)) << hw;
  }
  g.clock_event_reasons = 0;
  g.ecc_corrected_errors = 5;
  EXPECT_TRUE(gpu_healthy(g));
  g.ecc_uncorrected_errors = 1;
  EXPECT_FALSE(gpu_healthy(g));
  g.ecc_uncorrected_errors = 0;
  g.xid_errors = 1;
  EXPECT_FALSE(gpu_healthy(g));
}

TEST(DeviceUuidTest, FormatsLikeNvml) {
  const unsigned char bytes[16] = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0,
                                   0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  EXPECT_EQ(format_gpu_uuid(bytes), "GPU-12345678-9abc-def0-0123-456789abcdef");
}

TEST(MetricsTest, LaunchPathsAndBatchingAreCountedPerRecordOnOneSeries) {
  // A series' metrics are looked up once per kind of record (its launch path, whether it was
  // merged): the counts still follow each record, and requests of one kind share one counter.
  Metrics m = make_metrics();
  RequestRecord captured = gemm_ok("cublas", 10);
  captured.launch_path = "graph_captured";
  RequestRecord replayed = gemm_ok("cublas", 10);
  replayed.launch_path = "graph_replayed";
  RequestRecord merged = replayed;
  merged.merged_requests = 3;
  for (const RequestRecord& r : {captured, replayed, replayed, merged, merged}) m.record(r);
  const std::string text = m.scrape();
  EXPECT_EQ(sample_sum(text, "matserve_requests_total", {{"variant", "cublas"}}), 5);
  EXPECT_EQ(sample_sum(text, "matserve_launches_total", {{"path", "graph_captured"}}), 1);
  EXPECT_EQ(sample_sum(text, "matserve_launches_total", {{"path", "graph_replayed"}}), 4);
  EXPECT_EQ(sample_sum(text, "matserve_batch_merged_requests_count", {}), 2);
  EXPECT_EQ(sample_sum(text, "matserve_batch_merged_requests_sum", {}), 6);
  EXPECT_EQ(sample_sum(text, "matserve_batched_products_count", {}), -1);  // no series at all
}

}  // namespace
}  // namespace matserve::server
