// Rung: thread coarsening. Each thread of the coalesced kernel computes four outputs of
// one row, 32 columns apart (so a warp's loads of B' stay coalesced); the element of A' it loads
// once per step now feeds four multiply-adds, cutting A' traffic and index arithmetic by four.
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_kernels.h"

namespace matserve::kernels {
namespace {

using simt::i64;
constexpr int kCols = 32;
constexpr int kRows = 8;
constexpr int kCoarse = 4;  // outputs per thread, kCols apart

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kCols* kRows) coarsened_kernel(simt::Args<T> g, i64 n_tiles) {
  i64 tm, tn;
  simt::tile_coords(n_tiles, tm, tn);
  const i64 i = tm * kRows + threadIdx.y;
  const i64 j0 = tn * kCols * kCoarse + threadIdx.x;
  if (i >= g.m) return;
  T acc[kCoarse] = {};
  for (i64 p = 0; p < g.k; ++p) {
    const T a = simt::load_a<TA>(g.a, g.lda, i, p);
#pragma unroll
    for (int c = 0; c < kCoarse; ++c) {
      const i64 j = j0 + c * kCols;
      if (j < g.n) acc[c] += a * simt::load_b<TB>(g.b, g.ldb, p, j);
    }
  }
#pragma unroll
  for (int c = 0; c < kCoarse; ++c) {
    const i64 j = j0 + c * kCols;
    if (j < g.n) simt::store_c(g.c, g.ldc, i, j, acc[c], g.alpha, g.beta);
  }
}

}  // namespace

cudaError_t launch_gemm_coarsened(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const i64 n_tiles = simt::ceil_div(p.n, kCols * kCoarse);
    const i64 blocks = simt::ceil_div(p.m, kRows) * n_tiles;
    coarsened_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(kCols, kRows), 0, stream>>>(
            simt::make_args<T>(p), n_tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
