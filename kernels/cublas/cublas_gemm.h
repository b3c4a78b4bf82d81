// cuBLAS GEMM for every precision (the library yardstick and the first GPU variant): cublasGemmEx
// with the compute type each precision names, on the stream's own handle and workspace.
#pragma once

#include "absl/status/status.h"
#include "kernels/gemm_problem.h"
#include "kernels/registry.h"

namespace matserve::kernels {

absl::Status cublas_gemm(const GemmProblem& p, const ExecContext& ctx);
absl::Status cublas_gemm_can_implement(const GemmProblem& p);

}  // namespace matserve::kernels
