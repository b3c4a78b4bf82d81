// CUDA and cuBLAS error codes as absl::Status, so every layer above speaks one error vocabulary.
// Out-of-memory maps to RESOURCE_EXHAUSTED; everything else to INTERNAL with the call named.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace matserve::kernels {

inline absl::Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const auto msg = absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

inline absl::Status cublas_status(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const auto msg = absl::StrCat(what, ": cuBLAS status ", static_cast<int>(e));
  if (e == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (e == CUBLAS_STATUS_NOT_SUPPORTED || e == CUBLAS_STATUS_ARCH_MISMATCH) {
    return absl::FailedPreconditionError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace matserve::kernels
