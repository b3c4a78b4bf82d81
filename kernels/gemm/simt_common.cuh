// Shared pieces of the CUDA-core (SIMT) GEMM ladder: element accessors that absorb the operand
// orders (a_trans, b_trans) of the canonical problem, the alpha/beta epilogue (C is never read when
// beta == 0), and host-side dispatch from a GemmProblem to a kernel instantiated on <T, TA, TB>.
// Device-only helpers; no absl. Included by kernels/gemm/*.cu of the SIMT ladder.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/gemm_problem.h"

namespace matserve::kernels::simt {

using i64 = std::int64_t;

// A'(i, p) of the m x k operand; kTrans: stored k x m (m contiguous).
template <bool kTrans, typename T>
__device__ __forceinline__ T load_a(const T* a, i64 lda, i64 i, i64 p) {
  return kTrans ? a[p * lda + i] : a[i * lda + p];
}

// B'(p, j) of the k x n operand; kTrans: stored n x k (k contiguous).
template <bool kTrans, typename T>
__device__ __forceinline__ T load_b(const T* b, i64 ldb, i64 p, i64 j) {
  return kTrans ? b[j * ldb + p] : b[p * ldb + j];
}

// C(i, j) = alpha * acc + beta * C(i, j); C is not read when beta == 0 (it may hold NaN).
template <typename T>
__device__ __forceinline__ void store_c(T* c, i64 ldc, i64 i, i64 j, T acc, T alpha, T beta) {
  T* dst = c + i * ldc + j;
  *dst = beta == T(0) ? alpha * acc : alpha * acc + beta * *dst;
}

// Kernel arguments, typed. Built on the host from a GemmProblem.
template <typename T>
struct Args {
  i64 m, n, k;
  const T* a;
  i64 lda;
  const T* b;
  i64 ldb;
  T* c;
  i64 ldc;
  T alpha, beta;
};

template <typename T>
Args<T> make_args(const GemmProblem& p) {
  return Args<T>{p.m,
                 p.n,
                 p.k,
                 static_cast<const T*>(p.a),
                 p.lda,
                 static_cast<const T*>(p.b),
                 p.ldb,
                 static_cast<T*>(p.c),
                 p.ldc,
                 static_cast<T>(p.alpha),
                 static_cast<T>(p.beta)};
}

__host__ __device__ inline i64 ceil_div(i64 a, i64 b) {
  return (a + b - 1) / b;
}

// Blocks of a 2D tiling of C, flattened into blockIdx.x (no 65535 limit on y). Tiles along n are
// adjacent in launch order, so neighbouring blocks share rows of A in L2.
__device__ __forceinline__ void tile_coords(i64 n_tiles, i64& tile_m, i64& tile_n) {
  tile_m = static_cast<i64>(blockIdx.x) / n_tiles;
  tile_n = static_cast<i64>(blockIdx.x) % n_tiles;
}

// Calls f(T{}, integral_constant<TA>, integral_constant<TB>) for the operand orders.
template <typename T, typename F>
cudaError_t dispatch_orders(const GemmProblem& p, F&& f) {
  using TA = std::true_type;
  using FA = std::false_type;
  if (p.m <= 0 || p.n <= 0) return cudaSuccess;  // empty C: nothing to write
  if (p.a_trans && p.b_trans) return f(T{}, TA{}, TA{});
  if (p.a_trans) return f(T{}, TA{}, FA{});
  if (p.b_trans) return f(T{}, FA{}, TA{});
  return f(T{}, FA{}, FA{});
}

// fp64 problems get T = double, everything else T = float.
template <typename F>
cudaError_t dispatch(const GemmProblem& p, F&& f) {
  if (p.precision == Precision::kF64) return dispatch_orders<double>(p, f);
  return dispatch_orders<float>(p, f);
}

// fp32 only (variants that do not claim fp64): no double instantiation.
template <typename F>
cudaError_t dispatch_f32(const GemmProblem& p, F&& f) {
  if (p.precision == Precision::kF64) return cudaErrorInvalidValue;
  return dispatch_orders<float>(p, f);
}

// One-time raise of a kernel's dynamic shared-memory limit (above 48 KB needs an opt-in).
template <typename K>
cudaError_t allow_smem(K kernel, int bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

}  // namespace matserve::kernels::simt
