// Metric families built at scrape time from the runtime's snapshot rather than kept as live
// counters: slots, queue, pools, resident matrices, rejections (the GPUs' are in gpu_families.h).
// Only what a snapshot holds is exported: no pool, no pool family. A device that is a GPU also
// carries its UUID, so these series join with the GPU ones and with dcgm-exporter's.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "prometheus/metric_family.h"
#include "server/runtime/backend.h"
#include "server/runtime/cpu_keep_awake.h"
#include "server/runtime/pinned_heap.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {

// What the runtime reports at a scrape.
struct RuntimeSnapshot {
  std::vector<DeviceStats> devices;               // per device: scheduler, memory pool, staging
  std::optional<ResidentStats> resident;          // resident matrices, when the runtime keeps them
  std::optional<PinnedHeapStats> message_heap;    // pinned message memory (zeros when none)
  std::optional<CpuKeepAwake::Stats> keep_awake;  // CPU keep-awake spinners (zeros when off)
  std::optional<PoolStats> host_matrices;  // pinned host memory of too-large matrices (zeros: none)
};

// `uuid_by_device` ("cuda:0" -> "GPU-...") gives the UUID label; a device not in it has none.
std::vector<prometheus::MetricFamily> runtime_families(
    const RuntimeSnapshot& snapshot, const std::map<std::string, std::string>& uuid_by_device);

}  // namespace matserve::server
