// Snapshot metric families: see snapshot_families.h.
#include "server/metrics/snapshot_families.h"

#include <deque>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

namespace matserve::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// Collects families in order (a deque: references stay valid), dropping the empty ones.
class Families {
 public:
  MetricFamily& add(std::string name, std::string help, MetricType type) {
    families_.push_back(MetricFamily{std::move(name), std::move(help), type, {}});
    return families_.back();
  }
  std::vector<MetricFamily> take() && {
    std::vector<MetricFamily> out;
    for (MetricFamily& f : families_) {
      if (!f.metric.empty()) out.push_back(std::move(f));
    }
    return out;
  }

 private:
  std::deque<MetricFamily> families_;
};

void sample(MetricFamily& f, Labels labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

}  // namespace

std::vector<MetricFamily> runtime_families(const RuntimeSnapshot& snapshot) {
  Families f;
  MetricFamily& slots = f.add("matserve_execution_slots",
                              "Operations a device may run at once (streams on a GPU, workers on "
                              "the CPU)",
                              MetricType::Gauge);
  MetricFamily& running = f.add("matserve_execution_slots_in_use",
                                "Operations running on a device now", MetricType::Gauge);
  MetricFamily& queued =
      f.add("matserve_queue_depth", "Requests waiting for an execution slot and memory on a device",
            MetricType::Gauge);
  MetricFamily& admitted =
      f.add("matserve_admissions_total", "Requests the scheduler admitted to run on a device",
            MetricType::Counter);
  MetricFamily& rejected =
      f.add("matserve_admission_rejections_total",
            "Requests the scheduler turned away: reason=memory (can never fit the memory budget), "
            "queue_full (too many waiting), expired (deadline passed or cancelled while queued)",
            MetricType::Counter);
  MetricFamily& pool_bytes = f.add(
      "matserve_device_pool_bytes",
      "The device memory pool: state=in_use (handed out, resident matrices included) or cached "
      "(free blocks kept for reuse)",
      MetricType::Gauge);
  MetricFamily& pool_budget = f.add("matserve_device_pool_budget_bytes",
                                    "The most memory the pool may hand out", MetricType::Gauge);
  MetricFamily& pool_resident = f.add("matserve_device_pool_resident_bytes",
                                      "Pool memory held by resident matrices", MetricType::Gauge);
  MetricFamily& pool_allocs = f.add(
      "matserve_device_pool_allocations_total",
      "Pool allocations: result=hit (served from the cache) or miss (reached the raw allocator)",
      MetricType::Counter);
  MetricFamily& pool_failures =
      f.add("matserve_device_pool_allocation_failures_total",
            "Raw allocations that failed even after the cache was trimmed", MetricType::Counter);
  MetricFamily& staging =
      f.add("matserve_staging_pinned_bytes",
            "Pinned host memory held for staging copies to and from a device", MetricType::Gauge);
  MetricFamily& resident =
      f.add("matserve_resident_matrices",
            "Matrices kept on the server for clients (resident handles)", MetricType::Gauge);
  MetricFamily& resident_bytes =
      f.add("matserve_resident_bytes", "Memory held by resident matrices", MetricType::Gauge);
  MetricFamily& resident_expired = f.add(
      "matserve_resident_expired_total",
      "Resident matrices released because they stayed idle past the TTL", MetricType::Counter);

  for (const DeviceStats& d : snapshot.devices) {
    const Labels dev = {{"device", d.label}};
    const auto with = [&d](const char* name, const char* value) {
      return Labels{{"device", d.label}, {name, value}};
    };
    const SchedulerStats& s = d.scheduler;
    sample(slots, dev, s.slots);
    sample(running, dev, s.running);
    sample(queued, dev, s.queued);
    sample(admitted, dev, static_cast<double>(s.admitted));
    sample(rejected, with("reason", "memory"), static_cast<double>(s.rejected_memory));
    sample(rejected, with("reason", "queue_full"), static_cast<double>(s.rejected_queue));
    sample(rejected, with("reason", "expired"), static_cast<double>(s.expired));
    const PoolStats& p = d.pool;
    sample(pool_bytes, with("state", "in_use"), static_cast<double>(p.in_use_bytes));
    sample(pool_bytes, with("state", "cached"), static_cast<double>(p.cached_bytes));
    sample(pool_budget, dev, static_cast<double>(p.budget_bytes));
    sample(pool_resident, dev, static_cast<double>(p.long_lived_bytes));
    sample(pool_allocs, with("result", "hit"), static_cast<double>(p.hits));
    sample(pool_allocs, with("result", "miss"), static_cast<double>(p.misses));
    sample(pool_failures, dev, static_cast<double>(p.raw_failures));
    sample(staging, dev, static_cast<double>(d.staging_pinned_bytes));
  }
  if (snapshot.message_heap.has_value()) {
    const PinnedHeapStats& h = *snapshot.message_heap;
    MetricFamily& bytes = f.add("matserve_pinned_message_bytes",
                                "Pinned host memory for large request and reply buffers (DMA with "
                                "no staging copy): state=capacity or in_use",
                                MetricType::Gauge);
    MetricFamily& blocks =
        f.add("matserve_pinned_message_allocations_total",
              "Large buffers: result=pinned (placed in pinned message memory) or fallback (did not "
              "fit, so staged through the rings: raise --pinned_message_bytes if this grows)",
              MetricType::Counter);
    sample(bytes, {{"state", "capacity"}}, static_cast<double>(h.capacity_bytes));
    sample(bytes, {{"state", "in_use"}}, static_cast<double>(h.in_use_bytes));
    sample(blocks, {{"result", "pinned"}}, static_cast<double>(h.allocations));
    sample(blocks, {{"result", "fallback"}}, static_cast<double>(h.fallbacks));
  }
  if (snapshot.keep_awake.has_value()) {
    const CpuKeepAwake::Stats& k = *snapshot.keep_awake;
    MetricFamily& threads = f.add(
        "matserve_keep_awake_threads",
        "CPU keep-awake spinners (--keep_cpus_awake_ms): state=spinning (keeping a CPU awake at "
        "idle priority) or parked (no call lately, or resting while calls overlap)",
        MetricType::Gauge);
    sample(threads, {{"state", "spinning"}}, static_cast<double>(k.spinning));
    sample(threads, {{"state", "parked"}}, static_cast<double>(k.parked));
  }
  if (snapshot.resident.has_value()) {
    sample(resident, {}, static_cast<double>(snapshot.resident->count));
    sample(resident_bytes, {}, static_cast<double>(snapshot.resident->bytes));
    sample(resident_expired, {}, static_cast<double>(snapshot.resident->expired_total));
  }
  return std::move(f).take();
}

std::vector<MetricFamily> gpu_families(const std::vector<GpuReading>& gpus,
                                       const std::map<std::string, std::string>& device_by_uuid) {
  Families f;
  struct Field {
    MetricFamily* family;
    std::optional<double> GpuReading::*value;
  };
  const Field fields[] = {
      {&f.add("matserve_gpu_utilization_ratio",
              "Fraction of the last sample period in which a kernel ran (NVML)", MetricType::Gauge),
       &GpuReading::utilization},
      {&f.add("matserve_gpu_memory_utilization_ratio",
              "Fraction of the last sample period in which device memory was read or written "
              "(NVML)",
              MetricType::Gauge),
       &GpuReading::memory_utilization},
      {&f.add("matserve_gpu_memory_used_bytes", "Device memory in use by all processes (NVML)",
              MetricType::Gauge),
       &GpuReading::memory_used_bytes},
      {&f.add("matserve_gpu_memory_total_bytes", "Device memory installed (NVML)",
              MetricType::Gauge),
       &GpuReading::memory_total_bytes},
      {&f.add("matserve_gpu_temperature_celsius", "GPU core temperature (NVML)", MetricType::Gauge),
       &GpuReading::temperature_celsius},
      {&f.add("matserve_gpu_power_watts", "Board power draw (NVML)", MetricType::Gauge),
       &GpuReading::power_watts},
      {&f.add("matserve_gpu_sm_clock_hertz", "Current SM clock (NVML)", MetricType::Gauge),
       &GpuReading::sm_clock_hertz},
  };
  for (const GpuReading& g : gpus) {
    const auto it = device_by_uuid.find(g.uuid);
    const std::string device = it == device_by_uuid.end() ? "unused" : it->second;
    const Labels labels = {{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}, {"device", device}};
    for (const Field& field : fields) {
      if (const std::optional<double>& v = g.*field.value; v.has_value()) {
        sample(*field.family, labels, *v);
      }
    }
  }
  return std::move(f).take();
}

}  // namespace matserve::server
