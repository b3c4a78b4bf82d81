// Metric families and recording: see metrics.h.
#include "server/metrics/metrics.h"

#include <cmath>
#include <iterator>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "prometheus/text_serializer.h"

namespace matserve::server {
namespace {

// 10 us to 60 s: fine below 1 ms, where small requests and the stages of every request fall
// (10, 20, 30, 40, 50, 60, 80, 100, 125, 150, 200, 250, 300, 400, 500, 600, 800 us), then
// doubling from 1 ms to 32.8 s, then 60 s.
prometheus::Histogram::BucketBoundaries make_latency_buckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double us : {10, 20, 30, 40, 50, 60, 80, 100, 125, 150, 200, 250, 300, 400, 500, 600, 800})
    b.push_back(us * 1e-6);
  for (int i = 0; i < 16; ++i) b.push_back(std::ldexp(1e-3, i));  // 1 ms .. 32.8 s
  b.push_back(60.0);
  return b;
}

// m*n*k (or rows*cols) from 1 to 2^42 in powers of 8.
prometheus::Histogram::BucketBoundaries make_size_buckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (int i = 0; i <= 14; ++i) b.push_back(std::ldexp(1.0, 3 * i));  // 8^0 .. 8^14 = 2^42
  return b;
}

// Requests or products per launch: 1, 2, 4, ... 65536.
prometheus::Histogram::BucketBoundaries make_count_buckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (int i = 0; i <= 16; ++i) b.push_back(std::ldexp(1.0, i));
  return b;
}

// Delay added by dynamic batching: 0 (ran at once) then 10 us to about 1.3 s, doubling.
prometheus::Histogram::BucketBoundaries make_wait_buckets() {
  prometheus::Histogram::BucketBoundaries b{0.0};
  for (int i = 0; i < 18; ++i) b.push_back(std::ldexp(10e-6, i));  // 10 us .. 1.31 s
  return b;
}

}  // namespace

Metrics::Metrics(const BuildInfo& build)
    : registry_(std::make_shared<prometheus::Registry>()),
      latency_buckets_(make_latency_buckets()),
      size_buckets_(make_size_buckets()),
      count_buckets_(make_count_buckets()),
      wait_buckets_(make_wait_buckets()) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  requests_ =
      &BuildCounter()
           .Name("matserve_requests_total")
           .Help("Finished RPCs by rpc, operation, variant, precision, device and status code")
           .Register(*registry_);
  in_flight_ = &BuildGauge()
                    .Name("matserve_requests_in_flight")
                    .Help("RPCs being served now")
                    .Register(*registry_)
                    .Add({});
  duration_ = &BuildHistogram()
                   .Name("matserve_request_duration_seconds")
                   .Help(
                       "Time per stage of GEMM and transpose requests (stage=total|queue|"
                       "host_to_device|kernel|device_to_host; outcome=ok, or error with the "
                       "total only)")
                   .Register(*registry_);
  flops_ = &BuildCounter()
                .Name("matserve_kernel_flops_total")
                .Help(
                    "Floating-point operations (2*m*n*k) done by GEMM kernels; rate() over "
                    "matserve_kernel_seconds_total gives achieved FLOP/s")
                .Register(*registry_);
  kernel_bytes_ = &BuildCounter()
                       .Name("matserve_kernel_bytes_total")
                       .Help("Bytes read plus written by transpose kernels")
                       .Register(*registry_);
  kernel_seconds_ = &BuildCounter()
                         .Name("matserve_kernel_seconds_total")
                         .Help("Time spent in kernels")
                         .Register(*registry_);
  received_ = &BuildCounter()
                   .Name("matserve_received_bytes_total")
                   .Help("Request message bytes received")
                   .Register(*registry_);
  sent_ = &BuildCounter()
               .Name("matserve_sent_bytes_total")
               .Help("Reply message bytes sent")
               .Register(*registry_);
  problem_size_ = &BuildHistogram()
                       .Name("matserve_problem_size_elements")
                       .Help("m*n*k of GEMMs and rows*cols of transposes")
                       .Register(*registry_);
  launches_ = &BuildCounter()
                   .Name("matserve_launches_total")
                   .Help(
                       "GEMMs and transposes by how their device work was enqueued "
                       "(path=graph_replayed|graph_captured|direct)")
                   .Register(*registry_);
  merged_ = &BuildHistogram()
                 .Name("matserve_batch_merged_requests")
                 .Help(
                     "Dynamic batching: for each successful Multiply, the requests its launch "
                     "computed (1: it ran alone)")
                 .Register(*registry_);
  batch_wait_ = &BuildHistogram()
                     .Name("matserve_batch_wait_seconds")
                     .Help(
                         "Dynamic batching: for each successful Multiply, the time it waited for "
                         "other requests to join its launch")
                     .Register(*registry_);
  products_ = &BuildHistogram()
                   .Name("matserve_batched_products")
                   .Help("Products per successful MultiplyBatched call")
                   .Register(*registry_);
  resident_duration_ =
      &BuildHistogram()
           .Name("matserve_resident_rpc_duration_seconds")
           .Help(
               "Time from receipt to reply of the resident-matrix and ranged-transfer RPCs "
               "(CreateResident, WriteRange, ReadRange, Upload, Download, their streams, "
               "ListResident, Release) by rpc and outcome (ok|error)")
           .Register(*registry_);
  BuildGauge()
      .Name("matserve_build_info")
      .Help("Build identity (always 1)")
      .Register(*registry_)
      .Add({{"version", build.version},
            {"git_sha", build.git_sha},
            {"cuda_version", build.cuda_version},
            {"backend", build.backend}})
      .Set(1);
  applier_ = std::thread([this] {
    for (;;) {
      {
        absl::MutexLock lock(&queue_mu_);
        queue_mu_.AwaitWithTimeout(absl::Condition(&stopping_), kApplyEvery);
        if (stopping_) return;  // records still queued die with the families
      }
      apply_queued();
    }
  });
}

struct Metrics::Series {
  prometheus::Counter* requests = nullptr;
  prometheus::Counter* received = nullptr;
  prometheus::Counter* sent = nullptr;
  // Successful gemm/transpose only (null otherwise).
  prometheus::Histogram* stages[5] = {};  // total, queue, host_to_device, kernel, device_to_host
  // Failed gemm/transpose only: its total time (outcome="error").
  prometheus::Histogram* failed_total = nullptr;
  prometheus::Counter* kernel_seconds = nullptr;
  prometheus::Counter* work = nullptr;  // flops (gemm) or kernel bytes (transpose)
  prometheus::Histogram* problem_size = nullptr;
  // By device, for the records whose key says they have one (null otherwise).
  prometheus::Counter* launches = nullptr;      // {path}: the record's launch path
  prometheus::Histogram* merged = nullptr;      // dynamic batching
  prometheus::Histogram* batch_wait = nullptr;  // dynamic batching
  prometheus::Histogram* products = nullptr;    // MultiplyBatched
  // Resident-matrix and ranged-transfer RPCs only: their time from receipt to reply.
  prometheus::Histogram* resident_total = nullptr;
  prometheus::Labels device;  // {device} and, for a GPU, {UUID}: built once, read per request
};

Metrics::~Metrics() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  applier_.join();
}

Metrics::Series& Metrics::series(const RequestRecord& r) {
  // Everything a series' metrics depend on, so that a request finds all of them in one lookup.
  std::string key;
  for (const std::string* part :
       {&r.rpc, &r.op, &r.variant, &r.precision, &r.device, &r.code, &r.launch_path}) {
    key += *part;
    key += '\0';
  }
  key += r.merged_requests > 0 ? 'm' : '-';
  key += r.products > 0 ? 'p' : '-';
  absl::MutexLock lock(&series_mu_);
  std::unique_ptr<Series>& slot = series_[key];
  if (slot != nullptr) return *slot;
  auto s = std::make_unique<Series>();
  s->device = device_labels(r.device);
  prometheus::Labels request = s->device;
  request.insert({{"rpc", r.rpc},
                  {"op", r.op},
                  {"variant", r.variant},
                  {"precision", r.precision},
                  {"code", r.code}});
  s->requests = &requests_->Add(request);
  s->received = &received_->Add({{"rpc", r.rpc}});
  s->sent = &sent_->Add({{"rpc", r.rpc}});
  const bool compute = r.op == "gemm" || r.op == "transpose";
  prometheus::Labels k = s->device;
  k.insert({{"op", r.op}, {"variant", r.variant}, {"precision", r.precision}});
  if (compute && r.code != "OK") {
    prometheus::Labels l = k;
    l.insert({{"stage", "total"}, {"outcome", "error"}});
    s->failed_total = &duration_->Add(l, latency_buckets_);
  }
  if (compute && r.code == "OK") {
    const char* stages[5] = {"total", "queue", "host_to_device", "kernel", "device_to_host"};
    for (int i = 0; i < 5; ++i) {
      prometheus::Labels l = k;
      l.insert({{"stage", stages[i]}, {"outcome", "ok"}});
      s->stages[i] = &duration_->Add(l, latency_buckets_);
    }
    s->kernel_seconds = &kernel_seconds_->Add(k);
    s->work = r.op == "gemm" ? &flops_->Add(k) : &kernel_bytes_->Add(k);
    s->problem_size = &problem_size_->Add({{"op", r.op}}, size_buckets_);
  }
  if (compute && r.code == "OK" && !r.launch_path.empty()) {
    prometheus::Labels l = s->device;
    l.emplace("path", r.launch_path);
    s->launches = &launches_->Add(l);
  }
  if (compute && r.code == "OK" && r.merged_requests > 0) {
    s->merged = &merged_->Add(s->device, count_buckets_);
    s->batch_wait = &batch_wait_->Add(s->device, wait_buckets_);
  }
  if (compute && r.code == "OK" && r.products > 0) {
    s->products = &products_->Add(s->device, count_buckets_);
  }
  if (r.op == "resident") {
    s->resident_total = &resident_duration_->Add(
        {{"rpc", r.rpc}, {"outcome", r.code == "OK" ? "ok" : "error"}}, latency_buckets_);
  }
  slot = std::move(s);
  return *slot;
}

void Metrics::record(RequestRecord r) {
  bool full = false;
  {
    absl::MutexLock lock(&queue_mu_);
    queued_.push_back(std::move(r));
    full = queued_.size() >= kMaxQueued;
  }
  if (full) apply_queued();
}

std::size_t Metrics::queued_records() {
  absl::MutexLock lock(&queue_mu_);
  return queued_.size();
}

void Metrics::apply_queued() {
  absl::MutexLock applying(&apply_mu_);
  std::vector<RequestRecord> records;
  {
    absl::MutexLock lock(&queue_mu_);
    records.swap(queued_);
  }
  for (const RequestRecord& r : records) apply(r);
}

void Metrics::apply(const RequestRecord& r) {
  Series& s = series(r);
  s.requests->Increment();
  s.received->Increment(static_cast<double>(r.bytes_received));
  s.sent->Increment(static_cast<double>(r.bytes_sent));
  if (s.failed_total != nullptr) s.failed_total->Observe(r.times.total_us * 1e-6);
  if (s.resident_total != nullptr) s.resident_total->Observe(r.times.total_us * 1e-6);
  if (s.kernel_seconds == nullptr) return;  // failed, or not a compute RPC
  const double stage_us[5] = {r.times.total_us, r.times.queue_us, r.times.host_to_device_us,
                              r.times.kernel_us, r.times.device_to_host_us};
  for (int i = 0; i < 5; ++i) s.stages[i]->Observe(stage_us[i] * 1e-6);
  s.kernel_seconds->Increment(r.times.kernel_us * 1e-6);
  s.work->Increment(r.work);
  s.problem_size->Observe(r.problem_size);
  if (s.launches != nullptr) s.launches->Increment();
  if (s.merged != nullptr) {
    s.merged->Observe(r.merged_requests);
    s.batch_wait->Observe(r.batch_wait_us * 1e-6);
  }
  if (s.products != nullptr) s.products->Observe(static_cast<double>(r.products));
}

void Metrics::set_runtime_source(std::function<RuntimeSnapshot()> source) {
  runtime_source_ = std::move(source);
}

void Metrics::set_gpu_source(std::unique_ptr<Nvml> nvml,
                             std::map<std::string, std::string> device_by_uuid) {
  nvml_ = std::move(nvml);
  device_by_uuid_ = std::move(device_by_uuid);
  uuid_by_device_.clear();
  for (const auto& [uuid, device] : device_by_uuid_) uuid_by_device_[device] = uuid;
}

prometheus::Labels Metrics::device_labels(const std::string& device) const {
  prometheus::Labels labels = {{"device", device}};
  if (const auto it = uuid_by_device_.find(device); it != uuid_by_device_.end()) {
    labels.emplace("UUID", it->second);
  }
  return labels;
}

std::string Metrics::scrape() {
  apply_queued();
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<prometheus::MetricFamily> runtime =
      runtime_families(runtime_source_ ? runtime_source_() : RuntimeSnapshot{}, uuid_by_device_);
  families.insert(families.end(), std::make_move_iterator(runtime.begin()),
                  std::make_move_iterator(runtime.end()));
  if (nvml_ != nullptr) {
    std::vector<prometheus::MetricFamily> gpus = gpu_families(nvml_->read(), device_by_uuid_);
    families.insert(families.end(), std::make_move_iterator(gpus.begin()),
                    std::make_move_iterator(gpus.end()));
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace matserve::server
