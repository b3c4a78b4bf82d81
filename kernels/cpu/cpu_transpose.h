// CPU out-of-place transpose with an optional scale, cache-blocked, for every dtype.
#pragma once

#include "absl/status/status.h"
#include "kernels/registry.h"
#include "kernels/transpose_problem.h"

namespace matserve::kernels {

absl::Status cpu_blocked_transpose(const TransposeProblem& p, const ExecContext& ctx);

// In place (in == out, any shape) through a scratch copy of the matrix: O(rows*cols) extra host
// memory, for resident matrices on the CPU backend.
absl::Status cpu_inplace_transpose(const TransposeProblem& p, const ExecContext& ctx);

}  // namespace matserve::kernels
