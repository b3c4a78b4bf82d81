// cuBLAS GEMM: see cublas_gemm.h. cuBLAS is column-major; the canonical row-major C (m x n) is the
// column-major C^T (n x m) = B'^T * A'^T, so the operands swap places and keep their own flags.
// Batched problems go to cublasGemmStridedBatchedEx (strides, 0 broadcasting one matrix) or
// cublasGemmBatchedEx (device pointer arrays).
#include "kernels/cublas/cublas_gemm.h"

#include <cublas_v2.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace matserve::kernels {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF64: return CUDA_R_64F;
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF8E4M3: return CUDA_R_8F_E4M3;
  }
  return CUDA_R_32F;
}

cublasComputeType_t compute_type(Precision p) {
  switch (p) {
    case Precision::kF64: return CUBLAS_COMPUTE_64F;
    case Precision::kF32: return CUBLAS_COMPUTE_32F_PEDANTIC;  // IEEE fp32, no tensor cores
    case Precision::kTF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Precision::kF16:
    case Precision::kBF16:
    case Precision::kF8: return CUBLAS_COMPUTE_32F;
  }
  return CUBLAS_COMPUTE_32F;
}

}  // namespace

absl::Status cublas_gemm_can_implement(const GemmProblem& p) {
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  if (p.m > kMax || p.n > kMax || p.k > kMax || p.lda > kMax || p.ldb > kMax || p.ldc > kMax) {
    return absl::FailedPreconditionError("variant 'cublas': dimensions must fit in 32 bits");
  }
  if (p.batch.count > kMax) {
    return absl::FailedPreconditionError("variant 'cublas': at most 2^31-1 products per batch");
  }
  const bool sixteen = p.precision == Precision::kF16 || p.precision == Precision::kBF16;
  if (sixteen && p.in_type == DType::kF32) {
    return absl::FailedPreconditionError(
        "variant 'cublas': fp16/bf16 operands must be converted before the call");
  }
  return absl::OkStatus();
}

absl::Status cublas_gemm(const GemmProblem& p, const ExecContext& ctx) {
  if (absl::Status s = cublas_gemm_can_implement(p); !s.ok()) return s;
  auto* handle = static_cast<cublasHandle_t>(ctx.cublas);
  if (handle == nullptr) return absl::InternalError("cublas_gemm: no cuBLAS handle in context");
  const float alpha_f = static_cast<float>(p.alpha);
  const float beta_f = static_cast<float>(p.beta);
  const bool f64 = p.precision == Precision::kF64;
  const void* alpha = f64 ? static_cast<const void*>(&p.alpha) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&p.beta) : &beta_f;
  const cublasOperation_t op_first = p.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = p.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  const int lda = static_cast<int>(p.lda), ldb = static_cast<int>(p.ldb);
  const int ldc = static_cast<int>(p.ldc);
  const cudaDataType_t in = cuda_type(p.in_type), out = cuda_type(p.out_type);
  if (p.batch.count == 1) {
    return cublas_status(
        cublasGemmEx(handle, op_first, op_second, n, m, k, alpha, p.b, in, ldb, p.a, in, lda, beta,
                     p.c, out, ldc, compute_type(p.precision), CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }
  const int count = static_cast<int>(p.batch.count);
  if (p.batch.has_arrays()) {
    return cublas_status(
        cublasGemmBatchedEx(handle, op_first, op_second, n, m, k, alpha, p.batch.b_array, in, ldb,
                            p.batch.a_array, in, lda, beta, p.batch.c_array, out, ldc, count,
                            compute_type(p.precision), CUBLAS_GEMM_DEFAULT),
        "cublasGemmBatchedEx");
  }
  return cublas_status(cublasGemmStridedBatchedEx(
                           handle, op_first, op_second, n, m, k, alpha, p.b, in, ldb,
                           p.batch.stride_b, p.a, in, lda, p.batch.stride_a, beta, p.c, out, ldc,
                           p.batch.stride_c, count, compute_type(p.precision), CUBLAS_GEMM_DEFAULT),
                       "cublasGemmStridedBatchedEx");
}

}  // namespace matserve::kernels
