// Metric families and recording: see metrics.h.
#include "server/metrics/metrics.h"

#include <iterator>
#include <sstream>
#include <utility>
#include <vector>

#include "prometheus/text_serializer.h"

namespace matserve::server {
namespace {

// 50 us to 60 s, doubling: 50us, 100us, ..., 52.4s, then 60s.
const prometheus::Histogram::BucketBoundaries& latency_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = [] {
    prometheus::Histogram::BucketBoundaries b;
    for (double v = 50e-6; v < 60.0; v *= 2) b.push_back(v);
    b.push_back(60.0);
    return b;
  }();
  return buckets;
}

// m*n*k (or rows*cols) from 1 to 2^42 in powers of 8.
const prometheus::Histogram::BucketBoundaries& size_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = [] {
    prometheus::Histogram::BucketBoundaries b;
    for (double v = 1; v <= 4.4e12; v *= 8) b.push_back(v);
    return b;
  }();
  return buckets;
}

}  // namespace

Metrics::Metrics(const BuildInfo& build) : registry_(std::make_shared<prometheus::Registry>()) {
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
                       "Time per stage of successful requests (stage=total|queue|host_to_device|"
                       "kernel|device_to_host)")
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
  BuildGauge()
      .Name("matserve_build_info")
      .Help("Build identity (always 1)")
      .Register(*registry_)
      .Add({{"version", build.version},
            {"git_sha", build.git_sha},
            {"cuda_version", build.cuda_version},
            {"backend", build.backend}})
      .Set(1);
}

void Metrics::record(const RequestRecord& r) {
  requests_
      ->Add({{"rpc", r.rpc},
             {"op", r.op},
             {"variant", r.variant},
             {"precision", r.precision},
             {"device", r.device},
             {"code", r.code}})
      .Increment();
  received_->Add({{"rpc", r.rpc}}).Increment(static_cast<double>(r.bytes_received));
  sent_->Add({{"rpc", r.rpc}}).Increment(static_cast<double>(r.bytes_sent));
  if (r.code != "OK" || (r.op != "gemm" && r.op != "transpose")) return;

  const prometheus::Labels base = {
      {"op", r.op}, {"variant", r.variant}, {"precision", r.precision}};
  const auto observe = [&](const char* stage, double us) {
    prometheus::Labels l = base;
    l.emplace("stage", stage);
    duration_->Add(l, latency_buckets()).Observe(us * 1e-6);
  };
  observe("total", r.times.total_us);
  observe("queue", r.times.queue_us);
  observe("host_to_device", r.times.host_to_device_us);
  observe("kernel", r.times.kernel_us);
  observe("device_to_host", r.times.device_to_host_us);

  prometheus::Labels k = base;
  k.emplace("device", r.device);
  kernel_seconds_->Add(k).Increment(r.times.kernel_us * 1e-6);
  if (r.op == "gemm") {
    flops_->Add(k).Increment(r.work);
  } else {
    kernel_bytes_->Add(k).Increment(r.work);
  }
  problem_size_->Add({{"op", r.op}}, size_buckets()).Observe(r.problem_size);
}

void Metrics::set_runtime_source(std::function<RuntimeSnapshot()> source) {
  runtime_source_ = std::move(source);
}

void Metrics::set_gpu_source(std::unique_ptr<Nvml> nvml,
                             std::map<std::string, std::string> device_by_uuid) {
  nvml_ = std::move(nvml);
  device_by_uuid_ = std::move(device_by_uuid);
}

std::string Metrics::scrape() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<prometheus::MetricFamily> runtime =
      runtime_families(runtime_source_ ? runtime_source_() : RuntimeSnapshot{});
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
