// NVML through dlopen: see nvml.h. The declarations below are the few parts of nvml.h used here,
// written out by hand (names, types and values as NVML's public header documents them) so that
// the build needs neither the header nor the library.
#include "server/metrics/nvml.h"

#include <dlfcn.h>

#include <cstdlib>

namespace matserve::server {
namespace {

using nvmlReturn_t = int;  // enum; NVML_SUCCESS = 0
constexpr nvmlReturn_t kNvmlSuccess = 0;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;     // percent of the sample period a kernel was running
  unsigned int memory;  // percent of the sample period device memory was read or written
};
struct nvmlMemory_t {        // version 1 of the struct (nvmlDeviceGetMemoryInfo)
  unsigned long long total;  // NOLINT(runtime/int): NVML's type
  unsigned long long free;   // NOLINT(runtime/int)
  unsigned long long used;   // NOLINT(runtime/int)
};
constexpr nvmlReturn_t kNvmlTimeout = 10;  // NVML_ERROR_TIMEOUT
constexpr int kNvmlTemperatureGpu = 0;     // nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU
constexpr int kNvmlClockSm = 1;            // nvmlClockType_t NVML_CLOCK_SM
constexpr unsigned kUuidBufferSize = 96;   // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned kNameBufferSize = 96;   // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr int kEccCorrected = 0;           // nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_CORRECTED
constexpr int kEccUncorrected = 1;         // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kEccVolatile = 0;            // nvmlEccCounterType_t NVML_VOLATILE_ECC
using u64 = unsigned long long;            // NOLINT(runtime/int): NVML's type
constexpr u64 kEventXidCriticalError = 0x8;  // nvmlEventTypeXidCriticalError
struct nvmlEventSet_st;
using nvmlEventSet_t = nvmlEventSet_st*;
struct nvmlEventData_t {  // the struct nvmlEventSetWait_v2 fills
  nvmlDevice_t device;
  u64 eventType;
  u64 eventData;  // the Xid number for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr unsigned kEventWaitMs = 500;  // how long the destructor may wait for the watcher

}  // namespace

struct Nvml::Api {
  void* handle = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;       // milliwatts
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;  // MHz
  // Optional (older drivers lack some): a missing one leaves its reading empty.
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*energy)(nvmlDevice_t, u64*) = nullptr;                // millijoules
  nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned int*) = nullptr;  // milliwatts
  nvmlReturn_t (*clock_reasons)(nvmlDevice_t, u64*) = nullptr;
  nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, u64*) = nullptr;
  nvmlReturn_t (*event_set_create)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*register_events)(nvmlDevice_t, u64, nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*event_set_wait)(nvmlEventSet_t, nvmlEventData_t*, unsigned int) = nullptr;
  nvmlReturn_t (*event_set_free)(nvmlEventSet_t) = nullptr;

  ~Api() {
    if (handle != nullptr) dlclose(handle);
  }
};

namespace {

template <typename F>
bool resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

}  // namespace

std::unique_ptr<Nvml> Nvml::load(const std::string& library) {
  std::string path = library;
  if (path.empty()) {
    const char* env = std::getenv("MATSERVE_NVML_LIBRARY");
    path = env != nullptr && env[0] != '\0' ? env : "libnvidia-ml.so.1";
  }
  auto api = std::make_unique<Api>();
  api->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr) return nullptr;
  void* h = api->handle;
  const bool ok = resolve(h, "nvmlInit_v2", api->init) &&
                  resolve(h, "nvmlShutdown", api->shutdown) &&
                  resolve(h, "nvmlDeviceGetCount_v2", api->device_count) &&
                  resolve(h, "nvmlDeviceGetHandleByIndex_v2", api->handle_by_index) &&
                  resolve(h, "nvmlDeviceGetUUID", api->uuid) &&
                  resolve(h, "nvmlDeviceGetUtilizationRates", api->utilization) &&
                  resolve(h, "nvmlDeviceGetMemoryInfo", api->memory) &&
                  resolve(h, "nvmlDeviceGetTemperature", api->temperature) &&
                  resolve(h, "nvmlDeviceGetPowerUsage", api->power) &&
                  resolve(h, "nvmlDeviceGetClockInfo", api->clock);
  if (!ok || api->init() != kNvmlSuccess) return nullptr;
  resolve(h, "nvmlDeviceGetName", api->name);
  resolve(h, "nvmlDeviceGetTotalEnergyConsumption", api->energy);
  resolve(h, "nvmlDeviceGetEnforcedPowerLimit", api->power_limit);
  if (!resolve(h, "nvmlDeviceGetCurrentClocksEventReasons", api->clock_reasons)) {
    resolve(h, "nvmlDeviceGetCurrentClocksThrottleReasons", api->clock_reasons);  // before R535
  }
  resolve(h, "nvmlDeviceGetTotalEccErrors", api->ecc);
  const bool events = resolve(h, "nvmlEventSetCreate", api->event_set_create) &&
                      resolve(h, "nvmlDeviceRegisterEvents", api->register_events) &&
                      resolve(h, "nvmlEventSetWait_v2", api->event_set_wait) &&
                      resolve(h, "nvmlEventSetFree", api->event_set_free);
  auto nvml = std::unique_ptr<Nvml>(new Nvml(std::move(api)));  // NOLINT: private constructor
  if (events) {
    nvml->xid_thread_ =
        std::jthread([n = nvml.get()](std::stop_token stop) { n->watch_xids(stop); });
  }
  return nvml;
}

Nvml::Nvml(std::unique_ptr<Api> api) : api_(std::move(api)) {}

Nvml::~Nvml() {
  if (xid_thread_.joinable()) {  // before nvmlShutdown: the watcher is inside NVML
    xid_thread_.request_stop();
    xid_thread_.join();
  }
  api_->shutdown();
}

void Nvml::watch_xids(const std::stop_token& stop) {
  nvmlEventSet_t set = nullptr;
  if (api_->event_set_create(&set) != kNvmlSuccess) return;
  unsigned int count = 0;
  bool any = false;
  if (api_->device_count(&count) == kNvmlSuccess) {
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      if (api_->handle_by_index(i, &dev) != kNvmlSuccess) continue;
      // NOT_SUPPORTED on boards without Xid events (and without permission): left unwatched.
      any = api_->register_events(dev, kEventXidCriticalError, set) == kNvmlSuccess || any;
    }
  }
  if (any) {
    const std::lock_guard lock(xid_mu_);
    xid_watch_ = true;
  }
  while (any && !stop.stop_requested()) {
    nvmlEventData_t event{};
    const nvmlReturn_t r = api_->event_set_wait(set, &event, kEventWaitMs);
    if (r == kNvmlTimeout) continue;
    if (r != kNvmlSuccess) break;  // the set or the driver went away: stop watching
    if ((event.eventType & kEventXidCriticalError) == 0) continue;
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      if (api_->handle_by_index(i, &dev) == kNvmlSuccess && dev == event.device) {
        const std::lock_guard lock(xid_mu_);
        XidCount& x = xids_[i];
        x.count += 1;
        x.last = static_cast<double>(event.eventData);
      }
    }
  }
  api_->event_set_free(set);
}

void Nvml::read_optional(nvmlDevice_st* dev, GpuReading& r) const {
  if (char name[kNameBufferSize] = {};
      api_->name != nullptr && api_->name(dev, name, kNameBufferSize) == kNvmlSuccess) {
    r.model_name = name;
  }
  if (u64 mj = 0; api_->energy != nullptr && api_->energy(dev, &mj) == kNvmlSuccess) {
    r.energy_joules = static_cast<double>(mj) / 1000.0;
  }
  if (unsigned int mw = 0;
      api_->power_limit != nullptr && api_->power_limit(dev, &mw) == kNvmlSuccess) {
    r.power_limit_watts = mw / 1000.0;
  }
  if (u64 bits = 0;
      api_->clock_reasons != nullptr && api_->clock_reasons(dev, &bits) == kNvmlSuccess) {
    r.clock_event_reasons = bits;
  }
  if (api_->ecc != nullptr) {  // NOT_SUPPORTED where ECC is off or absent
    if (u64 n = 0; api_->ecc(dev, kEccCorrected, kEccVolatile, &n) == kNvmlSuccess) {
      r.ecc_corrected_errors = static_cast<double>(n);
    }
    if (u64 n = 0; api_->ecc(dev, kEccUncorrected, kEccVolatile, &n) == kNvmlSuccess) {
      r.ecc_uncorrected_errors = static_cast<double>(n);
    }
  }
}

std::vector<GpuReading> Nvml::read() const {
  std::vector<GpuReading> out;
  unsigned int count = 0;
  if (api_->device_count(&count) != kNvmlSuccess) return out;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    if (api_->handle_by_index(i, &dev) != kNvmlSuccess) continue;
    GpuReading& r = out.emplace_back();
    r.index = i;
    char uuid[kUuidBufferSize] = {};
    if (api_->uuid(dev, uuid, kUuidBufferSize) == kNvmlSuccess) r.uuid = uuid;
    if (nvmlUtilization_t u{}; api_->utilization(dev, &u) == kNvmlSuccess) {
      r.utilization = u.gpu / 100.0;
      r.memory_utilization = u.memory / 100.0;
    }
    if (nvmlMemory_t m{}; api_->memory(dev, &m) == kNvmlSuccess) {
      r.memory_used_bytes = static_cast<double>(m.used);
      r.memory_total_bytes = static_cast<double>(m.total);
    }
    if (unsigned int t = 0; api_->temperature(dev, kNvmlTemperatureGpu, &t) == kNvmlSuccess) {
      r.temperature_celsius = t;
    }
    if (unsigned int mw = 0; api_->power(dev, &mw) == kNvmlSuccess) r.power_watts = mw / 1000.0;
    if (unsigned int mhz = 0; api_->clock(dev, kNvmlClockSm, &mhz) == kNvmlSuccess) {
      r.sm_clock_hertz = mhz * 1e6;
    }
    read_optional(dev, r);
  }
  const std::lock_guard lock(xid_mu_);
  if (xid_watch_) {
    for (GpuReading& r : out) {
      const auto it = xids_.find(r.index);
      r.xid_errors = it == xids_.end() ? 0.0 : it->second.count;
      r.last_xid = it == xids_.end() ? 0.0 : it->second.last;
    }
  }
  return out;
}

}  // namespace matserve::server
