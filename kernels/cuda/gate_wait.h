// The device half of StreamGate (stream_gate.h): a one-thread kernel that holds its stream until
// a word of pinned host memory reaches a value. Plain header: no absl, so .cu files can include it.
#pragma once

#include <cuda_runtime_api.h>

namespace matserve::kernels {

// Enqueues on `stream` a wait until *flag (a device-visible pointer to pinned host memory, written
// by the host with increasing values) is at least `value`, comparing with wrap-around.
cudaError_t launch_gate_wait(const unsigned int* flag, unsigned int value, cudaStream_t stream);

}  // namespace matserve::kernels
