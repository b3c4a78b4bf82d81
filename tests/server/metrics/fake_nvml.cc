// A stand-in for the driver's libnvidia-ml.so.1 with two GPUs and fixed readings, so that the
// NVML path of the metrics (dlopen, symbol lookup, labels, the Xid event thread) runs in CI, where
// there is no driver. Loaded through MATSERVE_NVML_LIBRARY. GPU 0 is healthy and idle; GPU 1
// reports no power or energy reading (NOT_SUPPORTED), 3 corrected ECC errors, a hardware thermal
// slowdown with a software power cap, and one Xid 79 event, delivered on the first wait.
// Built a second time with MATSERVE_FAKE_NVML_CORE_ONLY: then only the functions the server
// requires exist (as in an old driver), and none of the optional ones (name, energy, power limit,
// clock event reasons, ECC, events).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace {
struct FakeDevice {
  int index;
};
FakeDevice devices[2] = {{0}, {1}};
int initialized = 0;
std::atomic<bool> xid_delivered{false};
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
constexpr int kTimeout = 10;

using u64 = unsigned long long;  // NOLINT(runtime/int): NVML's type
struct nvmlEventData_t {
  void* device;
  u64 eventType;
  u64 eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
int event_set_token = 0;

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

#ifndef MATSERVE_FAKE_NVML_CORE_ONLY
int nvmlDeviceGetName(void* /*device*/, char* name, unsigned int length) {
  std::snprintf(name, length, "NVIDIA H100 80GB HBM3");
  return kSuccess;
}
int nvmlDeviceGetTotalEnergyConsumption(void* device, u64* millijoules) {
  if (static_cast<FakeDevice*>(device)->index == 1) return kNotSupported;
  *millijoules = 123456789;
  return kSuccess;
}
int nvmlDeviceGetEnforcedPowerLimit(void* /*device*/, unsigned int* milliwatts) {
  *milliwatts = 700000;
  return kSuccess;
}
int nvmlDeviceGetCurrentClocksEventReasons(void* device, u64* reasons) {
  *reasons = static_cast<FakeDevice*>(device)->index == 1 ? (0x40 | 0x4) : 0x1;
  return kSuccess;
}
int nvmlDeviceGetTotalEccErrors(void* device, int error_type, int counter_type, u64* count) {
  if (counter_type != 0) return kInvalidArgument;  // only volatile counts are asked for
  *count = static_cast<FakeDevice*>(device)->index == 1 && error_type == 0 ? 3 : 0;
  return kSuccess;
}
int nvmlEventSetCreate(void** set) {
  *set = &event_set_token;
  return kSuccess;
}
int nvmlDeviceRegisterEvents(void* /*device*/, u64 event_types, void* /*set*/) {
  return event_types == 0x8 ? kSuccess : kInvalidArgument;  // Xid critical errors only
}
int nvmlEventSetWait_v2(void* /*set*/, nvmlEventData_t* data, unsigned int timeout_ms) {
  if (!xid_delivered.exchange(true)) {
    *data = nvmlEventData_t{&devices[1], 0x8, 79, 0, 0};
    return kSuccess;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms < 50 ? timeout_ms : 50));
  return kTimeout;
}
int nvmlEventSetFree(void* /*set*/) {
  return kSuccess;
}
#endif  // MATSERVE_FAKE_NVML_CORE_ONLY

}  // extern "C"
