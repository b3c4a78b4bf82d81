// cuBLASLt GEMM variants (fp16, bf16, tf32): cublasLtMatmul on the stream's own handle and
// workspace, with the heuristic's first choice cached per (shape, layout, types, alignment) so a
// repeated shape skips the ~1 us heuristic query. The library yardstick and the best `auto` pick.
#pragma once

#include "absl/status/status.h"
#include "kernels/gemm_problem.h"
#include "kernels/registry.h"

namespace matserve::kernels {

absl::Status cublaslt_gemm_can_implement(const GemmProblem& p);
absl::Status cublaslt_gemm(const GemmProblem& p, const ExecContext& ctx);

// Number of shapes whose algorithm is cached (for tests and metrics).
std::size_t cublaslt_cached_plans();

}  // namespace matserve::kernels
