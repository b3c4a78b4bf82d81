// Adapts a .cu file's plain launcher (cudaError_t f(const Problem&, cudaStream_t)) to the
// registry's launch signature, checking the launch error. Keeps absl out of nvcc-compiled files.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/registry.h"

namespace matserve::kernels {

template <typename Problem, cudaError_t (*Launch)(const Problem&, cudaStream_t)>
absl::Status launch_cuda(const Problem& p, const ExecContext& ctx) {
  return cuda_status(Launch(p, static_cast<cudaStream_t>(ctx.stream)), "kernel launch");
}

}  // namespace matserve::kernels
