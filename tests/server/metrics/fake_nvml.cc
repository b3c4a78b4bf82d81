// A stand-in for the driver's libnvidia-ml.so.1 with two GPUs and fixed readings, so that the
// NVML path of the metrics (dlopen, symbol lookup, labels) runs in CI, where there is no driver.
// Loaded through MATSERVE_NVML_LIBRARY. GPU 1 reports no power reading (NOT_SUPPORTED).
#include <cstdio>

namespace {
struct FakeDevice {
  int index;
};
FakeDevice devices[2] = {{0}, {1}};
int initialized = 0;
}  // namespace

extern "C" {

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;  // NOLINT(runtime/int): NVML's type
  unsigned long long free;   // NOLINT(runtime/int)
  unsigned long long used;   // NOLINT(runtime/int)
};

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;

int nvmlInit_v2() {
  ++initialized;
  return kSuccess;
}
int nvmlShutdown() {
  --initialized;
  return kSuccess;
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (initialized <= 0) return kUninitialized;
  *count = 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index >= 2) return kInvalidArgument;
  *device = &devices[index];
  return kSuccess;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  const int i = static_cast<FakeDevice*>(device)->index;
  std::snprintf(uuid, length, "GPU-00000000-0000-0000-0000-00000000000%d", i);
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void* device, nvmlUtilization_t* u) {
  const int i = static_cast<FakeDevice*>(device)->index;
  u->gpu = 37 + i;
  u->memory = 12;
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* /*device*/, nvmlMemory_t* m) {
  m->total = 80ull << 30;
  m->used = 1ull << 30;
  m->free = m->total - m->used;
  return kSuccess;
}
int nvmlDeviceGetTemperature(void* /*device*/, int sensor, unsigned int* t) {
  if (sensor != 0) return kInvalidArgument;
  *t = 41;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned int* milliwatts) {
  if (static_cast<FakeDevice*>(device)->index == 1) return kNotSupported;
  *milliwatts = 123456;
  return kSuccess;
}
int nvmlDeviceGetClockInfo(void* /*device*/, int type, unsigned int* mhz) {
  if (type != 1) return kInvalidArgument;
  *mhz = 1755;
  return kSuccess;
}

}  // extern "C"
