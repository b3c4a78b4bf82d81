// Rung 3, global-memory coalescing: the unrolled kernel with threadIdx.x running along a row of C.
// A warp now reads one element of A' (a broadcast) and 32 consecutive elements of B' per step and
// writes 32 consecutive elements of C: one or two 128-byte transactions instead of 32.
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_kernels.h"

namespace matserve::kernels {
namespace {

using simt::i64;
constexpr int kCols = 32;
constexpr int kRows = 8;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kCols* kRows) coalesced_kernel(simt::Args<T> g, i64 n_tiles) {
  i64 tm, tn;
  simt::tile_coords(n_tiles, tm, tn);
  const i64 i = tm * kRows + threadIdx.y;
  const i64 j = tn * kCols + threadIdx.x;  // consecutive threads: consecutive columns
  if (i >= g.m || j >= g.n) return;
  T s0 = T(0), s1 = T(0), s2 = T(0), s3 = T(0);
  i64 p = 0;
  for (; p + 4 <= g.k; p += 4) {
    s0 += simt::load_a<TA>(g.a, g.lda, i, p) * simt::load_b<TB>(g.b, g.ldb, p, j);
    s1 += simt::load_a<TA>(g.a, g.lda, i, p + 1) * simt::load_b<TB>(g.b, g.ldb, p + 1, j);
    s2 += simt::load_a<TA>(g.a, g.lda, i, p + 2) * simt::load_b<TB>(g.b, g.ldb, p + 2, j);
    s3 += simt::load_a<TA>(g.a, g.lda, i, p + 3) * simt::load_b<TB>(g.b, g.ldb, p + 3, j);
  }
  for (; p < g.k; ++p) {
    s0 += simt::load_a<TA>(g.a, g.lda, i, p) * simt::load_b<TB>(g.b, g.ldb, p, j);
  }
  simt::store_c(g.c, g.ldc, i, j, (s0 + s1) + (s2 + s3), g.alpha, g.beta);
}

}  // namespace

cudaError_t launch_gemm_coalesced(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const i64 n_tiles = simt::ceil_div(p.n, kCols);
    const i64 blocks = simt::ceil_div(p.m, kRows) * n_tiles;
    coalesced_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(kCols, kRows), 0, stream>>>(
            simt::make_args<T>(p), n_tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
