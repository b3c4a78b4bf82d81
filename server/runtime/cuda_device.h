// One CUDA device as the CUDA backend keeps it: its memory pool, its scheduler, and the stream
// slots its requests run on, each with the events that time a request's stages, a pinned staging
// ring and the graphs of its recent launches. Shared by the backend (which creates the devices)
// and the operations that run on them (cuda_operation.h).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/launch_graphs.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "server/runtime/backend.h"
#include "server/runtime/cuda_staging.h"
#include "server/runtime/device_scheduler.h"
#include "server/runtime/memory_pool.h"

namespace matserve::server {

// The events that bracket a request's device stages on its stream: the copies in (skipped when
// every operand is already on the device) and the device work (conversions and kernels).
struct StageEvents {
  kernels::Event copy_in_begin;
  kernels::Event copy_in_end;
  kernels::Event kernel_begin;
  kernels::Event kernel_end;

  static absl::StatusOr<StageEvents> create();
};

// One stream with its library handles and what a request holding it uses (only that request).
struct StreamSlot {
  kernels::StreamResources resources;
  StageEvents events;
  StagingRing staging;
  kernels::LaunchGraphs graphs;
  std::optional<kernels::LaunchGate> gate;  // with --gate_launches (launch_gate.h)
};

struct CudaDevice {
  int index = 0;    // in the backend's device list (what ResidentMatrix::device names)
  int ordinal = 0;  // CUDA device ordinal
  std::string label;
  std::string display_name;  // "cuda:0 NVIDIA H100 80GB HBM3", what replies name
  DeviceDescription description;
  std::unique_ptr<MemoryPool> pool;
  std::unique_ptr<DeviceScheduler> scheduler;
  std::vector<StreamSlot> slots;
  std::atomic<bool> healthy{true};
};

// Waits for a request's stream work; a sticky error (the context is unusable) takes the device out
// of service.
absl::Status finish_stream_work(cudaStream_t stream, std::atomic<bool>& healthy);

// Microseconds between two recorded events.
double elapsed_us(cudaEvent_t from, cudaEvent_t to);

}  // namespace matserve::server
