// CUDA device helpers: see cuda_device.h.
#include "server/runtime/cuda_device.h"

#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace matserve::server {
namespace {

// Errors after which the context is unusable: the device must stop serving.
bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown: return true;
    default: return false;
  }
}

}  // namespace

absl::StatusOr<StageEvents> StageEvents::create() {
  StageEvents events;
  for (kernels::Event* e :
       {&events.copy_in_begin, &events.copy_in_end, &events.kernel_begin, &events.kernel_end}) {
    absl::StatusOr<kernels::Event> created = kernels::create_event();
    if (!created.ok()) return created.status();
    *e = *std::move(created);
  }
  return events;
}

absl::Status finish_stream_work(cudaStream_t stream, std::atomic<bool>& healthy) {
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess && is_sticky(e)) healthy.store(false);
  return kernels::cuda_status(e, "device work");
}

double elapsed_us(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, from, to);
  return static_cast<double>(ms) * 1e3;
}

}  // namespace matserve::server
