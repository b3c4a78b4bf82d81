// GPU readings (utilization, memory, temperature, power and its limit, energy, SM clock, clock
// event reasons, ECC and Xid errors) from the driver's NVML library, loaded with dlopen at start
// rather than linked, so the server builds and runs where no driver is installed (CI): there,
// load() returns nullptr and no GPU metric is exported. Xid errors arrive as NVML events, which a
// background thread owned by Nvml waits for and counts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace matserve::server {

struct nvmlDevice_st;  // NVML's opaque device handle

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
  std::string model_name;                            // "NVIDIA H100 80GB HBM3"
  std::optional<double> energy_joules;               // since the driver was loaded
  std::optional<double> power_limit_watts;           // the enforced limit
  std::optional<std::uint64_t> clock_event_reasons;  // nvmlClocksEventReason* bits now active
  std::optional<double> ecc_corrected_errors;        // volatile counts: since the driver was loaded
  std::optional<double> ecc_uncorrected_errors;
  std::optional<double> xid_errors;  // Xid events seen since this process started watching
  std::optional<double> last_xid;    // the last one's Xid number (0: none yet)
};

// nvmlClocksEventReason* bits and the names the metrics give them.
struct ClockEventReason {
  std::uint64_t bit;
  const char* name;
};
inline constexpr ClockEventReason kClockEventReasons[] = {
    {0x1, "gpu_idle"},
    {0x2, "applications_clocks_setting"},
    {0x4, "sw_power_cap"},
    {0x8, "hw_slowdown"},
    {0x10, "sync_boost"},
    {0x20, "sw_thermal_slowdown"},
    {0x40, "hw_thermal_slowdown"},
    {0x80, "hw_power_brake_slowdown"},
    {0x100, "display_clock_setting"},
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
  struct XidCount {
    double count = 0;
    double last = 0;
  };
  explicit Nvml(std::unique_ptr<Api> api);
  // Registers every GPU for Xid events and waits for them until the destructor asks it to stop;
  // not started where the driver lacks the event functions.
  void watch_xids(const std::stop_token& stop);
  // The readings that need functions older drivers may lack.
  void read_optional(nvmlDevice_st* dev, GpuReading& r) const;

  std::unique_ptr<Api> api_;
  mutable std::mutex xid_mu_;
  std::map<unsigned, XidCount> xids_;  // by NVML index; guarded by xid_mu_
  bool xid_watch_ = false;             // events registered (xid_errors reported); xid_mu_
  std::jthread xid_thread_;            // last member: stopped and joined first
};

}  // namespace matserve::server
