// The canonical GEMM every kernel implements: C (m x n, row-major) = alpha * A' * B' + beta * C.
// Any request (layouts, op(A), op(B)) reduces to this form on the host (see canonicalize_gemm), so
// a kernel handles exactly two operand orders per operand and never sees a column-major output.
// Plain C++ (no CUDA, no absl) so .cu files can include it.
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace matserve::kernels {

// Where the products of a batched problem keep their matrices: product z reads A at
// a + z * stride_a elements (stride 0: one A for every product, "broadcast"), likewise B and C;
// or, with device arrays of `count` pointers, at a_array[z], b_array[z], c_array[z] (the
// problem's a, b, c are then not read). Arrays are all set or all null.
struct GemmBatch {
  std::int64_t count = 1;
  std::int64_t stride_a = 0;
  std::int64_t stride_b = 0;
  std::int64_t stride_c = 0;
  const void* const* a_array = nullptr;
  const void* const* b_array = nullptr;
  void* const* c_array = nullptr;
  // Every pointer in the arrays is 16-byte aligned (the caller checked, on the host): vector
  // loads may be used.
  bool arrays_aligned16 = false;
  // Host copies of the three arrays (optional; set with them, null otherwise): variants that run
  // a batch one product after another from the host (the fp8 ones) read the pointers here.
  const void* const* host_a_array = nullptr;
  const void* const* host_b_array = nullptr;
  void* const* host_c_array = nullptr;

  bool has_arrays() const { return a_array != nullptr; }
};

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
  // More than one product (count > 1): only variants marked `batched` in the registry take it.
  GemmBatch batch;
  // fp8 of fp32/fp16/bf16 data (quantized per tensor): where the per-tensor dequant scales the
  // product used go, A's then B's, product z's at [2z] and [2z + 1] (device or pinned host
  // memory, written on the stream). Null: not written. Untouched for e4m3 data.
  float* fp8_scales_out = nullptr;
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
  GemmBatch batch;  // a and b above describe product 0 (or are unused with pointer arrays)
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
  p.batch = r.batch;
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
    t.batch.stride_a = p.batch.stride_b;
    t.batch.stride_b = p.batch.stride_a;
    t.batch.a_array = p.batch.b_array;
    t.batch.b_array = p.batch.a_array;
    t.batch.host_a_array = p.batch.host_b_array;
    t.batch.host_b_array = p.batch.host_a_array;
    return t;
  }
  return p;
}

// fp8 of fp32/fp16/bf16 data: the product quantizes its operands per tensor (and writes the
// scales to fp8_scales_out when set).
inline bool quantizes_to_fp8(const GemmProblem& p) {
  return p.precision == Precision::kF8 && p.in_type != DType::kF8E4M3;
}

// Product z of a batched problem whose pointers (and pointer arrays) are host memory, as a
// problem of one product: what the CPU backend and the references compute.
inline GemmProblem host_product(const GemmProblem& p, std::int64_t z) {
  GemmProblem q = p;
  q.batch = GemmBatch{};
  const auto elem = static_cast<std::int64_t>(dtype_size(p.in_type));
  const auto out_elem = static_cast<std::int64_t>(dtype_size(p.out_type));
  if (p.batch.has_arrays()) {
    q.a = p.batch.a_array[z];
    q.b = p.batch.b_array[z];
    q.c = p.batch.c_array[z];
  } else {
    q.a = static_cast<const char*>(p.a) + z * p.batch.stride_a * elem;
    q.b = static_cast<const char*>(p.b) + z * p.batch.stride_b * elem;
    q.c = static_cast<char*>(p.c) + z * p.batch.stride_c * out_elem;
  }
  if (p.fp8_scales_out != nullptr) q.fp8_scales_out = p.fp8_scales_out + 2 * z;
  return q;
}

// 2 * m * n * k per product, the flop count GFLOP/s figures use.
inline double gemm_flops(const GemmProblem& p) {
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) *
         static_cast<double>(p.batch.count);
}

}  // namespace matserve::kernels
