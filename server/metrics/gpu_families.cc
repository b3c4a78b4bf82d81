// Per-GPU metric families from NVML readings: see gpu_families.h.
#include "server/metrics/gpu_families.h"

#include <cstdint>
#include <optional>

#include "server/metrics/family_builder.h"

namespace matserve::server {

using prometheus::MetricFamily;
using prometheus::MetricType;

bool gpu_healthy(const GpuReading& g) {
  constexpr std::uint64_t kHardwareSlowdown = 0x8 | 0x40 | 0x80;
  if (g.ecc_uncorrected_errors.value_or(0) > 0) return false;
  if (g.xid_errors.value_or(0) > 0) return false;
  return (g.clock_event_reasons.value_or(0) & kHardwareSlowdown) == 0;
}

std::vector<MetricFamily> gpu_families(const std::vector<GpuReading>& gpus,
                                       const std::map<std::string, std::string>& device_by_uuid) {
  FamilyBuilder f;
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
      {&f.add("matserve_gpu_power_limit_watts", "Enforced board power limit (NVML)",
              MetricType::Gauge),
       &GpuReading::power_limit_watts},
      {&f.add("matserve_gpu_energy_joules_total",
              "Energy the board consumed since the driver was loaded (NVML)", MetricType::Counter),
       &GpuReading::energy_joules},
      {&f.add("matserve_gpu_sm_clock_hertz", "Current SM clock (NVML)", MetricType::Gauge),
       &GpuReading::sm_clock_hertz},
      {&f.add("matserve_gpu_ecc_corrected_errors_total",
              "Corrected (single-bit) ECC errors since the driver was loaded (NVML, volatile)",
              MetricType::Counter),
       &GpuReading::ecc_corrected_errors},
      {&f.add("matserve_gpu_ecc_uncorrected_errors_total",
              "Uncorrected (double-bit) ECC errors since the driver was loaded (NVML, volatile)",
              MetricType::Counter),
       &GpuReading::ecc_uncorrected_errors},
      {&f.add("matserve_gpu_xid_errors_total",
              "Xid errors the driver reported for this GPU since the server started (NVML "
              "events)",
              MetricType::Counter),
       &GpuReading::xid_errors},
      {&f.add("matserve_gpu_last_xid",
              "The number of the last Xid error since the server started, 0 for none (as "
              "DCGM_FI_DEV_XID_ERRORS)",
              MetricType::Gauge),
       &GpuReading::last_xid},
  };
  MetricFamily& reasons = f.add("matserve_gpu_clock_event_reason_active",
                                "1 while the named reason holds the clocks down (NVML clock event "
                                "reasons, formerly throttle reasons), else 0",
                                MetricType::Gauge);
  MetricFamily& healthy = f.add("matserve_gpu_healthy",
                                "1 unless the GPU shows uncorrected ECC errors, an Xid error since "
                                "the server started, or a hardware slowdown now",
                                MetricType::Gauge);
  for (const GpuReading& g : gpus) {
    const auto it = device_by_uuid.find(g.uuid);
    const std::string device = it == device_by_uuid.end() ? "unused" : it->second;
    const MetricLabels labels = {{"gpu", std::to_string(g.index)},
                                 {"UUID", g.uuid},
                                 {"model_name", g.model_name},
                                 {"cuda_device", device}};
    for (const Field& field : fields) {
      if (const std::optional<double>& v = g.*field.value; v.has_value()) {
        add_sample(*field.family, labels, *v);
      }
    }
    if (g.clock_event_reasons.has_value()) {
      for (const ClockEventReason& r : kClockEventReasons) {
        MetricLabels with_reason = labels;
        with_reason.push_back({"reason", r.name});
        add_sample(reasons, std::move(with_reason), (*g.clock_event_reasons & r.bit) != 0 ? 1 : 0);
      }
    }
    add_sample(healthy, labels, gpu_healthy(g) ? 1 : 0);
  }
  return std::move(f).take();
}

}  // namespace matserve::server
