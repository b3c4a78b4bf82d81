// CPU GEMM through OpenBLAS: sgemm/dgemm directly on the data where the precision allows, and
// through fp32 copies (rounded to tf32/fp16/bf16 as asked) otherwise.
#pragma once

#include "absl/status/status.h"
#include "kernels/gemm_problem.h"
#include "kernels/registry.h"

namespace matserve::kernels {

absl::Status openblas_gemm(const GemmProblem& p, const ExecContext& ctx);

// OpenBLAS's thread count for every later call, unless $OPENBLAS_NUM_THREADS or
// $OMP_NUM_THREADS chose it (OpenBLAS itself counts the host's cores, not a container's CPU
// limit). Returns the count in force.
int set_openblas_threads(int threads);

}  // namespace matserve::kernels
