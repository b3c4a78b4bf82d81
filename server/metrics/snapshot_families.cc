// Snapshot metric families: see snapshot_families.h.
#include "server/metrics/snapshot_families.h"

#include <optional>
#include <string>
#include <utility>

#include "server/metrics/family_builder.h"

namespace matserve::server {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

}  // namespace

std::vector<MetricFamily> runtime_families(
    const RuntimeSnapshot& snapshot, const std::map<std::string, std::string>& uuid_by_device) {
  FamilyBuilder f;
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
    MetricLabels dev = {{"device", d.label}};
    if (const auto it = uuid_by_device.find(d.label); it != uuid_by_device.end()) {
      dev.push_back({"UUID", it->second});
    }
    const auto with = [&dev](const char* name, const char* value) {
      MetricLabels labels = dev;
      labels.push_back({name, value});
      return labels;
    };
    const SchedulerStats& s = d.scheduler;
    add_sample(slots, dev, s.slots);
    add_sample(running, dev, s.running);
    add_sample(queued, dev, s.queued);
    add_sample(admitted, dev, static_cast<double>(s.admitted));
    add_sample(rejected, with("reason", "memory"), static_cast<double>(s.rejected_memory));
    add_sample(rejected, with("reason", "queue_full"), static_cast<double>(s.rejected_queue));
    add_sample(rejected, with("reason", "expired"), static_cast<double>(s.expired));
    const PoolStats& p = d.pool;
    add_sample(pool_bytes, with("state", "in_use"), static_cast<double>(p.in_use_bytes));
    add_sample(pool_bytes, with("state", "cached"), static_cast<double>(p.cached_bytes));
    add_sample(pool_budget, dev, static_cast<double>(p.budget_bytes));
    add_sample(pool_resident, dev, static_cast<double>(p.long_lived_bytes));
    add_sample(pool_allocs, with("result", "hit"), static_cast<double>(p.hits));
    add_sample(pool_allocs, with("result", "miss"), static_cast<double>(p.misses));
    add_sample(pool_failures, dev, static_cast<double>(p.raw_failures));
    add_sample(staging, dev, static_cast<double>(d.staging_pinned_bytes));
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
    add_sample(bytes, {{"state", "capacity"}}, static_cast<double>(h.capacity_bytes));
    add_sample(bytes, {{"state", "in_use"}}, static_cast<double>(h.in_use_bytes));
    add_sample(blocks, {{"result", "pinned"}}, static_cast<double>(h.allocations));
    add_sample(blocks, {{"result", "fallback"}}, static_cast<double>(h.fallbacks));
  }
  if (snapshot.keep_awake.has_value()) {
    const CpuKeepAwake::Stats& k = *snapshot.keep_awake;
    MetricFamily& threads = f.add(
        "matserve_keep_awake_threads",
        "CPU keep-awake spinners (--keep_cpus_awake_ms): state=spinning (keeping a CPU awake at "
        "idle priority) or parked (no call lately, or resting while calls overlap)",
        MetricType::Gauge);
    add_sample(threads, {{"state", "spinning"}}, static_cast<double>(k.spinning));
    add_sample(threads, {{"state", "parked"}}, static_cast<double>(k.parked));
  }
  if (snapshot.host_matrices.has_value()) {
    const PoolStats& h = *snapshot.host_matrices;
    MetricFamily& bytes =
        f.add("matserve_host_matrix_bytes",
              "Pinned host memory of resident matrices too large for a device (multiplied out of "
              "core): state=in_use, cached (released, kept pinned for reuse) or budget "
              "(--max_host_matrix_bytes)",
              MetricType::Gauge);
    add_sample(bytes, {{"state", "in_use"}}, static_cast<double>(h.in_use_bytes));
    add_sample(bytes, {{"state", "cached"}}, static_cast<double>(h.cached_bytes));
    add_sample(bytes, {{"state", "budget"}}, static_cast<double>(h.budget_bytes));
  }
  if (snapshot.resident.has_value()) {
    add_sample(resident, {}, static_cast<double>(snapshot.resident->count));
    add_sample(resident_bytes, {}, static_cast<double>(snapshot.resident->bytes));
    add_sample(resident_expired, {}, static_cast<double>(snapshot.resident->expired_total));
  }
  return std::move(f).take();
}

}  // namespace matserve::server
