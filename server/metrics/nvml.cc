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
struct nvmlDevice_st;
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
constexpr int kNvmlTemperatureGpu = 0;    // nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU
constexpr int kNvmlClockSm = 1;           // nvmlClockType_t NVML_CLOCK_SM
constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

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
  return std::unique_ptr<Nvml>(new Nvml(std::move(api)));  // NOLINT: private constructor
}

Nvml::Nvml(std::unique_ptr<Api> api) : api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
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
  }
  return out;
}

}  // namespace matserve::server
