// The canonical GEMM every kernel implements: C (m x n, row-major) = alpha * A' * B' + beta * C.
// Any request (layouts, op(A), op(B)) reduces to this form on the host (see canonicalize_gemm), so
// a kernel handles exactly two operand orders per operand and never sees a column-major output.
// Plain C++ (no CUDA, no absl) so .cu files can include it.
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace matserve::kernels {

struct GemmProblem {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  // A' is m x k. a_trans == false: A'(i, p) = a[i * lda + p] (k contiguous);
  //              a_trans == true:  A'(i, p) = a[p * lda + i] (m contiguous).
  const void* a = nullptr;
  std::int64_t lda = 0;
  bool a_trans = false;
  // B' is k x n. b_trans == false: B'(p, j) = b[p * ldb + j] (n contiguous);
  //              b_trans == true:  B'(p, j) = b[j * ldb + p] (k contiguous).
  const void* b = nullptr;
  std::int64_t ldb = 0;
  bool b_trans = false;
  // C(i, j) = c[i * ldc + j], read when beta != 0 and always written, in out_type.
  void* c = nullptr;
  std::int64_t ldc = 0;
  DType in_type = DType::kF32;   // dtype of a and b as passed to the kernel
  DType out_type = DType::kF32;  // dtype of c
  Precision precision = Precision::kF32;
  double alpha = 1.0;
  double beta = 0.0;
};

// One stored operand of a user's request, before canonicalization.
struct GemmOperandDesc {
  std::int64_t rows = 0;  // as stored, before op()
  std::int64_t cols = 0;
  Layout layout = Layout::kRowMajor;
  bool transpose = false;  // op(X) = X^T
  const void* data = nullptr;
};

// A user's request: C = alpha * op(A) * op(B) + beta * C, each matrix in its own layout.
struct GemmRequestDesc {
  GemmOperandDesc a;
  GemmOperandDesc b;
  void* c = nullptr;  // m x n in c_layout, read when beta != 0
  Layout c_layout = Layout::kRowMajor;
  DType in_type = DType::kF32;
  DType out_type = DType::kF32;
  Precision precision = Precision::kF32;
  double alpha = 1.0;
  double beta = 0.0;
};

// Reduces a request to the canonical form. Shapes must already agree (validated by the caller):
// a column-major C is computed as the row-major C^T = op(B)^T * op(A)^T.
inline GemmProblem canonicalize_gemm(const GemmRequestDesc& r) {
  const auto ld = [](const GemmOperandDesc& x) {
    return x.layout == Layout::kRowMajor ? x.cols : x.rows;
  };
  const auto flipped = [](const GemmOperandDesc& x) {
    return x.transpose != (x.layout == Layout::kColMajor);
  };
  GemmProblem p;
  p.m = r.a.transpose ? r.a.cols : r.a.rows;
  p.k = r.a.transpose ? r.a.rows : r.a.cols;
  p.n = r.b.transpose ? r.b.rows : r.b.cols;
  p.a = r.a.data;
  p.lda = ld(r.a);
  p.a_trans = flipped(r.a);
  p.b = r.b.data;
  p.ldb = ld(r.b);
  p.b_trans = flipped(r.b);
  p.c = r.c;
  p.ldc = p.n;
  p.in_type = r.in_type;
  p.out_type = r.out_type;
  p.precision = r.precision;
  p.alpha = r.alpha;
  p.beta = r.beta;
  if (r.c_layout == Layout::kColMajor) {
    GemmProblem t = p;
    t.m = p.n;
    t.n = p.m;
    t.a = p.b;
    t.lda = p.ldb;
    t.a_trans = !p.b_trans;
    t.b = p.a;
    t.ldb = p.lda;
    t.b_trans = !p.a_trans;
    t.ldc = t.n;
    return t;
  }
  return p;
}

// 2 * m * n * k, the flop count GFLOP/s figures use.
inline double gemm_flops(const GemmProblem& p) {
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
}

}  // namespace matserve::kernels
