// cuBLAS geam transpose: see cublas_geam.h. The row-major input (rows x cols) is the column-major
// (cols x rows) matrix X; the row-major output (cols x rows) is the column-major (rows x cols)
// matrix scale * X^T, which is geam(op(A) = T, beta = 0).
#include "kernels/cublas/cublas_geam.h"

#include <cublas_v2.h>

#include <limits>

#include "kernels/cuda/cuda_status.h"

namespace matserve::kernels {

absl::Status cublas_geam_can_implement(const TransposeProblem& p) {
  if (p.dtype != DType::kF32 && p.dtype != DType::kF64) {
    return absl::FailedPreconditionError(
        "variant 'cublas_geam': fp32 and fp64 only (cuBLAS has no 16-bit geam)");
  }
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  if (p.rows > kMax || p.cols > kMax) {
    return absl::FailedPreconditionError("variant 'cublas_geam': dimensions must fit in 32 bits");
  }
  return absl::OkStatus();
}

absl::Status cublas_geam_transpose(const TransposeProblem& p, const ExecContext& ctx) {
  if (absl::Status s = cublas_geam_can_implement(p); !s.ok()) return s;
  auto* handle = static_cast<cublasHandle_t>(ctx.cublas);
  if (handle == nullptr) return absl::InternalError("cublas_geam: no cuBLAS handle in context");
  const int m = static_cast<int>(p.rows);
  const int n = static_cast<int>(p.cols);
  const int lda = static_cast<int>(p.ld_in);
  const int ldc = static_cast<int>(p.ld_out);
  if (p.dtype == DType::kF64) {
    const double alpha = p.scale;
    const double beta = 0.0;
    auto* out = static_cast<double*>(p.out);
    return cublas_status(
        cublasDgeam(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, &alpha,
                    static_cast<const double*>(p.in), lda, &beta, out, ldc, out, ldc),
        "cublasDgeam");
  }
  const float alpha = static_cast<float>(p.scale);
  const float beta = 0.0f;
  auto* out = static_cast<float*>(p.out);
  return cublas_status(cublasSgeam(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, &alpha,
                                   static_cast<const float*>(p.in), lda, &beta, out, ldc, out, ldc),
                       "cublasSgeam");
}

}  // namespace matserve::kernels
