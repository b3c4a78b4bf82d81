// Metric families built at scrape time from snapshots rather than kept as live counters: the
// runtime's state (slots, queue, pools, resident matrices, rejections) and NVML's GPU readings.
// Only what a snapshot holds is exported: no pool, no pool family; no NVML, no GPU family.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "prometheus/metric_family.h"
#include "server/metrics/nvml.h"
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
};

std::vector<prometheus::MetricFamily> runtime_families(const RuntimeSnapshot& snapshot);

// GPU gauges labelled gpu (NVML index), uuid and device: the server's label for that GPU, looked
// up by uuid in `device_by_uuid` ("GPU-..." -> "cuda:0"), or "unused" for a GPU it does not use.
std::vector<prometheus::MetricFamily> gpu_families(
    const std::vector<GpuReading>& gpus, const std::map<std::string, std::string>& device_by_uuid);

}  // namespace matserve::server
