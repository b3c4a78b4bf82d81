// cuBLASLt GEMM: see cublaslt_gemm.h. Like the cuBLAS variant, the canonical row-major C (m x n)
// is computed as the column-major C^T = B'^T * A'^T. The plan (descriptors and algorithm) is
// cached per shape (cublaslt_plan.h); batches go to one call, strided or with pointer arrays.
#include "kernels/cublaslt/cublaslt_gemm.h"

#include <cublasLt.h>

#include <cstdint>
#include <limits>

#include "kernels/cublaslt/cublaslt_plan.h"

namespace matserve::kernels {

absl::Status cublaslt_gemm_can_implement(const GemmProblem& p) {
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  if (p.m > kMax || p.n > kMax || p.k > kMax || p.lda > kMax || p.ldb > kMax || p.ldc > kMax) {
    return absl::FailedPreconditionError("variant 'cublaslt': dimensions must fit in 32 bits");
  }
  if (p.batch.count > kMax) {
    return absl::FailedPreconditionError("variant 'cublaslt': at most 2^31-1 products per batch");
  }
  switch (p.precision) {
    case Precision::kF16:
    case Precision::kBF16:
      if (p.in_type != (p.precision == Precision::kF16 ? DType::kF16 : DType::kBF16)) {
        return absl::FailedPreconditionError(
            "variant 'cublaslt': fp16/bf16 operands must be converted before the call");
      }
      return absl::OkStatus();
    case Precision::kTF32:
      if (p.in_type != DType::kF32 || p.out_type != DType::kF32) {
        return absl::FailedPreconditionError("variant 'cublaslt': tf32 takes and writes fp32");
      }
      return absl::OkStatus();
    default:
      return absl::FailedPreconditionError("variant 'cublaslt': computes fp16, bf16 and tf32 only");
  }
}

absl::Status cublaslt_gemm(const GemmProblem& p, const ExecContext& ctx) {
  if (absl::Status s = cublaslt_gemm_can_implement(p); !s.ok()) return s;
  LtCall call;
  call.p = &p;
  call.a_type = lt_data_type(p.in_type);
  call.b_type = call.a_type;
  call.c_type = lt_data_type(p.out_type);
  call.compute =
      p.precision == Precision::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  return lt_matmul(call, ctx);
}

std::size_t cublaslt_cached_plans() {
  return lt_plan_cache_size();
}

}  // namespace matserve::kernels
