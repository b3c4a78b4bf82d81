// The shared core of the cuBLASLt variants: one cublasLtMatmul call described by LtCall, with its
// plan (descriptors and the heuristic's algorithm) cached per (device, cuBLASLt handle, shape,
// transposes, types, pointer alignment, workspace) in a bounded least-recently-used cache.
// Internal to kernels/cublaslt.
#pragma once

#include <cublasLt.h>

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/gemm_problem.h"
#include "kernels/registry.h"

namespace matserve::kernels {

struct LtCall {
  const GemmProblem* p = nullptr;      // shapes, pointers, alpha/beta, transposes
  cudaDataType_t a_type = CUDA_R_16F;  // type of p->a (after any conversion)
  cudaDataType_t b_type = CUDA_R_16F;
  cudaDataType_t c_type = CUDA_R_32F;  // C and D
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  const void* a = nullptr;  // operand pointers override p->a / p->b when set (converted copies)
  const void* b = nullptr;
  const float* a_scale = nullptr;  // fp8 only: device pointers to per-tensor dequant scales
  const float* b_scale = nullptr;
  // fp8 only: accumulate in the tensor cores' own fp32 sum throughout, never promoting partial
  // sums to full fp32 (CUBLASLT_MATMUL_DESC_FAST_ACCUM): faster, less accurate for large k.
  bool fast_accum = false;
};

cudaDataType_t lt_data_type(DType t);
absl::Status lt_matmul(const LtCall& call, const ExecContext& ctx);
std::size_t lt_plan_cache_size();

}  // namespace matserve::kernels
