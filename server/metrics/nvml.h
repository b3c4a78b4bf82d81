// GPU readings (utilization, memory, temperature, power, SM clock) from the driver's NVML library,
// loaded with dlopen at start rather than linked, so the server builds and runs where no driver is
// installed (CI): there, load() returns nullptr and no GPU metric is exported.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace matserve::server {

// One GPU at one moment; a field NVML could not read (unsupported, no permission) is empty.
struct GpuReading {
  unsigned index = 0;  // NVML's index (not necessarily the CUDA ordinal: match by uuid)
  std::string uuid;    // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::optional<double> utilization;         // fraction of time a kernel ran, 0..1
  std::optional<double> memory_utilization;  // fraction of time memory was read or written, 0..1
  std::optional<double> memory_used_bytes;
  std::optional<double> memory_total_bytes;
  std::optional<double> temperature_celsius;
  std::optional<double> power_watts;
  std::optional<double> sm_clock_hertz;
};

class Nvml {
 public:
  // Opens `library` (default: $MATSERVE_NVML_LIBRARY, else "libnvidia-ml.so.1"), resolves the few
  // functions used and calls nvmlInit_v2. nullptr when the library or a function is missing or
  // initialization fails (no driver, no GPU).
  static std::unique_ptr<Nvml> load(const std::string& library = "");
  ~Nvml();  // nvmlShutdown, dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Reads every GPU NVML sees now. Thread-safe (NVML is).
  std::vector<GpuReading> read() const;

 private:
  struct Api;
  explicit Nvml(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace matserve::server
