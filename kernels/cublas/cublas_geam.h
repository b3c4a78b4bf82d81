// cuBLAS geam as the library's out-of-place transpose (fp32 and fp64; cuBLAS has no 16-bit geam).
#pragma once

#include "absl/status/status.h"
#include "kernels/registry.h"
#include "kernels/transpose_problem.h"

namespace matserve::kernels {

absl::Status cublas_geam_transpose(const TransposeProblem& p, const ExecContext& ctx);
absl::Status cublas_geam_can_implement(const TransposeProblem& p);

}  // namespace matserve::kernels
