// Float64 references for checking results: GEMM (fast through OpenBLAS dgemm, and a naive triple
// loop that checks the fast one), transpose, and the error measures replies and tests report.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gemm_problem.h"
#include "kernels/transpose_problem.h"

namespace matserve::kernels {

// alpha * A' * B' + beta * C0 in float64, row-major m x n. `c0` is C before the run (p.out_type,
// leading dimension p.ldc); it may be null when beta == 0. Operands are read as p.in_type; the
// rounding implied by p.precision (tf32, fp16, bf16 of fp32 data) is NOT applied: the reference is
// the exact product of the data the client sent.
std::vector<double> reference_gemm(const GemmProblem& p, const void* c0);
std::vector<double> reference_gemm_naive(const GemmProblem& p, const void* c0);

// scale * in^T in float64, row-major cols x rows.
std::vector<double> reference_transpose(const TransposeProblem& p);

struct ErrorStats {
  double max_abs_error = 0.0;
  double rel_l2_error = 0.0;   // ||out - ref|| / ||ref|| (absolute L2 when ||ref|| == 0)
  std::int64_t nonfinite = 0;  // NaN or Inf elements in `out`
};

// Compares `out` (rows x cols, row-major, leading dimension ld, dtype t) with `ref` (dense).
ErrorStats compare_with_reference(const void* out, DType t, std::int64_t rows, std::int64_t cols,
                                  std::int64_t ld, const std::vector<double>& ref);

}  // namespace matserve::kernels
