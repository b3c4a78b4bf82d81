// The one module that owns every metric family (prometheus-cpp) and renders the text exposition.
// Requests report into it through record(), which only queues the record: a background thread
// applies queued records to the families, and every scrape applies what is still queued first, so
// a scrape sees every request whose reply was sent before it began, and no reply waits for the
// families' locks and histogram buckets. The runtime's state and the GPUs' readings (NVML) are
// read at scrape time. Names follow <product>_<what>_<unit>; docs/metrics.md lists them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics/gpu_families.h"
#include "server/metrics/nvml.h"
#include "server/metrics/snapshot_families.h"
#include "server/runtime/jobs.h"

namespace matserve::server {

struct BuildInfo {
  std::string version;
  std::string git_sha;
  std::string cuda_version;
  std::string backend;
};

// One finished RPC, successful or not.
struct RequestRecord {
  std::string rpc;          // "Multiply", "Transpose", ...
  std::string op;           // "gemm", "transpose", "info"
  std::string variant;      // the variant that ran; "none" when it failed before choosing
  std::string precision;    // "fp32", "tf32", ...; "none" when unknown
  std::string device;       // "cuda:0", "cpu", "none"
  std::string code;         // gRPC status code name, e.g. "OK", "INVALID_ARGUMENT"
  StageTimes times;         // all zero for failed requests except total
  double work = 0;          // flops (gemm) or bytes moved (transpose) of the kernel
  double problem_size = 0;  // m*n*k (gemm) or rows*cols (transpose)
  std::int64_t bytes_received = 0;
  std::int64_t bytes_sent = 0;
  std::string launch_path;  // "graph_replayed", "graph_captured", "direct"; empty: not counted
  // Multiply: requests computed by the launch that computed this one (dynamic batching; 1 when
  // it ran alone) and the time it waited for them. 0: not a Multiply.
  int merged_requests = 0;
  double batch_wait_us = 0;
  std::int64_t products = 0;  // MultiplyBatched: products in the call; 0 otherwise
};

class Metrics {
 public:
  explicit Metrics(const BuildInfo& build);
  ~Metrics();

  // Queues one finished RPC's record (applied within kApplyEvery, or by the next scrape).
  void record(RequestRecord r);
  // Records queued and not yet applied.
  std::size_t queued_records();

  // Marks one request in flight for the lifetime of the returned guard.
  class InFlight {
   public:
    explicit InFlight(prometheus::Gauge& g) : gauge_(&g) { gauge_->Increment(); }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight() { gauge_->Decrement(); }

   private:
    prometheus::Gauge* gauge_;
  };
  InFlight in_flight() { return InFlight(*in_flight_); }
  // How many InFlight guards are alive now (RPC handlers running).
  double in_flight_count() const { return in_flight_->Value(); }

  // Read at every scrape: the runtime's snapshot (slots, queue, pools, resident matrices) and, when
  // set (non-null), NVML for the GPU gauges.
  // Call both before serving scrapes and requests. `device_by_uuid` ("GPU-..." -> "cuda:0") labels
  // NVML's GPUs with the server's device, and every series of a GPU device with its UUID.
  void set_runtime_source(std::function<RuntimeSnapshot()> source);
  void set_gpu_source(std::unique_ptr<Nvml> nvml,
                      std::map<std::string, std::string> device_by_uuid);

  // The Prometheus text exposition of every family, the queued records applied first.
  // Thread-safe.
  std::string scrape();

 private:
  // How often the background thread applies queued records, and how many may wait before
  // record() applies them itself (a burst of requests faster than the thread).
  static constexpr absl::Duration kApplyEvery = absl::Milliseconds(20);
  static constexpr std::size_t kMaxQueued = 4096;

  // Applies every queued record to the families (one caller at a time, in queue order).
  void apply_queued();
  void apply(const RequestRecord& r);

  // The metrics one kind of request (its labels) updates, found once and kept: prometheus-cpp's
  // Family::Add builds and hashes a label map under the family's lock on every call, about 20 us
  // per request on a GPU host for the ten series a multiply touches.
  struct Series;
  Series& series(const RequestRecord& r);
  // {device} and, for a GPU, {UUID}: the labels of a device's series.
  prometheus::Labels device_labels(const std::string& device) const;

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Gauge* in_flight_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Family<prometheus::Counter>* flops_;
  prometheus::Family<prometheus::Counter>* kernel_bytes_;
  prometheus::Family<prometheus::Counter>* kernel_seconds_;
  prometheus::Family<prometheus::Counter>* received_;
  prometheus::Family<prometheus::Counter>* sent_;
  prometheus::Family<prometheus::Histogram>* problem_size_;
  prometheus::Family<prometheus::Counter>* launches_;
  prometheus::Family<prometheus::Histogram>* merged_;
  prometheus::Family<prometheus::Histogram>* batch_wait_;
  prometheus::Family<prometheus::Histogram>* products_;
  prometheus::Family<prometheus::Histogram>* resident_duration_;
  std::function<RuntimeSnapshot()> runtime_source_;
  std::unique_ptr<Nvml> nvml_;
  std::map<std::string, std::string> device_by_uuid_;
  std::map<std::string, std::string> uuid_by_device_;  // its inverse
  // The histograms' bucket boundaries, read by series(): members, not function statics, because a
  // process that never destroys its Metrics (the fuzz harness's) runs static destructors while
  // the applier thread may still apply records.
  const prometheus::Histogram::BucketBoundaries latency_buckets_;
  const prometheus::Histogram::BucketBoundaries size_buckets_;
  const prometheus::Histogram::BucketBoundaries count_buckets_;
  const prometheus::Histogram::BucketBoundaries wait_buckets_;
  absl::Mutex series_mu_;
  std::unordered_map<std::string, std::unique_ptr<Series>> series_ ABSL_GUARDED_BY(series_mu_);

  absl::Mutex apply_mu_;  // held while queued records are taken and applied
  absl::Mutex queue_mu_;
  std::vector<RequestRecord> queued_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread applier_;  // applies queued records every kApplyEvery; last member: started last
};

}  // namespace matserve::server
