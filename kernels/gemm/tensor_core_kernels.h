// Launchers of the hand-written tensor-core GEMM kernels (WMMA, mma.sync, wgmma) in the registry's
// plain form, plus the small device helpers their epilogues share. No absl: .cu files include it;
// registry_tensor_core.cc adapts the launchers with launch_adapter.h.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/gemm_problem.h"

namespace matserve::kernels {

// How a hand-written tensor-core kernel reads an operand tile: K contiguous (kKMajor: A stored
// m x k, B stored n x k, i.e. transposed) or its M / N dimension contiguous (kMNMajor: A stored
// k x m, i.e. transposed, B stored k x n). wgmma's transpose immediates are 1 for kMNMajor.
enum class OperandOrder { kKMajor, kMNMajor };
constexpr OperandOrder a_order(bool a_trans) {
  return a_trans ? OperandOrder::kMNMajor : OperandOrder::kKMajor;
}
constexpr OperandOrder b_order(bool b_trans) {
  return b_trans ? OperandOrder::kKMajor : OperandOrder::kMNMajor;
}

// The element type a tensor-core epilogue writes C in (the problem's out_type).
enum class OutputKind { kF32, kF16, kBF16 };
constexpr OutputKind output_kind(DType out_type) {
  return out_type == DType::kF32   ? OutputKind::kF32
         : out_type == DType::kF16 ? OutputKind::kF16
                                   : OutputKind::kBF16;
}

// fp16/bf16 operands (in_type), fp32 accumulate, out_type fp32 or the operand type; any shape and
// transpose state.
cudaError_t launch_wmma_gemm(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_mma_sync_gemm(const GemmProblem& p, cudaStream_t stream);

// Hopper wgmma + TMA. Only on sm_90 devices (checked by the registry); operand constraints are
// described by wgmma_gemm_unsupported (null when the problem is supported).
cudaError_t launch_wgmma_gemm(const GemmProblem& p, cudaStream_t stream);
const char* wgmma_gemm_unsupported(const GemmProblem& p);
// The same kernel with a shared-memory + TMA bulk-store epilogue that overlaps the next tile:
// 16-bit output and beta == 0 only (see wgmma_tma_store_unsupported).
cudaError_t launch_wgmma_gemm_tma_store(const GemmProblem& p, cudaStream_t stream);
const char* wgmma_tma_store_unsupported(const GemmProblem& p);

// fp8 e4m3 on wgmma k32: both operands K-major (A stored m x k, B stored n x k, 16-byte rows),
// per-tensor dequant scales as device pointers (null: 1) multiplying alpha, fp32 accumulate
// (promoted to a second fp32 sum every 128 of K when `promote`), bf16, fp16 or fp32 output; limits
// described by wgmma_fp8_unsupported.
cudaError_t launch_wgmma_fp8_gemm(const GemmProblem& p, const float* scale_a, const float* scale_b,
                                  bool promote, cudaStream_t stream);
const char* wgmma_fp8_unsupported(const GemmProblem& p);

// fp64 on the fp64 tensor cores (mma.sync m16n8k4 .f64, sm_90): fp64 operands and output, any
// shape and transpose state, batched; limits described by dmma_gemm_unsupported.
cudaError_t launch_dmma_gemm(const GemmProblem& p, cudaStream_t stream);
const char* dmma_gemm_unsupported(const GemmProblem& p);

}  // namespace matserve::kernels

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace matserve::kernels::tc {

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// C = alpha * acc + beta * C in the element type `out`; C is read only when beta != 0.
__device__ __forceinline__ void store_c(void* c, long long idx, OutputKind out, float acc,
                                        float alpha, float beta) {
  if (out == OutputKind::kF32) {
    float* p = static_cast<float*>(c) + idx;
    *p = beta != 0.0f ? alpha * acc + beta * *p : alpha * acc;
  } else if (out == OutputKind::kF16) {
    __half* p = static_cast<__half*>(c) + idx;
    const float v = beta != 0.0f ? alpha * acc + beta * __half2float(*p) : alpha * acc;
    *p = __float2half_rn(v);
  } else {
    __nv_bfloat16* p = static_cast<__nv_bfloat16*>(c) + idx;
    const float v = beta != 0.0f ? alpha * acc + beta * __bfloat162float(*p) : alpha * acc;
    *p = __float2bfloat16_rn(v);
  }
}

}  // namespace matserve::kernels::tc
#endif
