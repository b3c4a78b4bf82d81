// The per-GPU metric families built at each scrape from NVML's readings, with labels that join
// with dcgm-exporter's series (gpu, UUID; model_name for its modelName) and the server's CUDA
// device under cuda_device (DCGM's own `device` is "nvidia0"), and the health gauge derived from
// them. No NVML, no GPU family.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "prometheus/metric_family.h"
#include "server/metrics/nvml.h"

namespace matserve::server {

// Every GPU series is labelled gpu (NVML index, as DCGM's), UUID ("GPU-...", as DCGM's),
// model_name (DCGM's modelName) and cuda_device: the server's device label for that GPU, looked
// up by UUID in `device_by_uuid` ("GPU-..." -> "cuda:0"), or "unused" for a GPU it does not use.
// A reading NVML could not give (empty optional) leaves its series out.
std::vector<prometheus::MetricFamily> gpu_families(
    const std::vector<GpuReading>& gpus, const std::map<std::string, std::string>& device_by_uuid);

// 1 unless a reading shows trouble: uncorrected ECC errors since the driver loaded, an Xid error
// since the server started watching, or a hardware slowdown (hw_slowdown, hw_thermal_slowdown,
// hw_power_brake_slowdown) active now. Readings NVML cannot give count as no trouble.
bool gpu_healthy(const GpuReading& g);

}  // namespace matserve::server
