// Rung 7, the seed's "final" V6: 32x32 tiles with padding, plus register prefetching and an
// unrolled inner loop. While the block multiplies tile t from shared memory, each thread already
// holds tile t+1's two elements in registers (their global loads are in flight during the math),
// so global latency overlaps compute instead of following it.
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_kernels.h"

namespace matserve::kernels {
namespace {

using simt::i64;
constexpr int kTile = 32;

// Element (r, c) of the tile at (r0, c0) of X, X(r, c) = g[r * ld + c] when kColsContig; the
// thread's element is chosen so that consecutive threads walk the contiguous index.
template <bool kColsContig, typename T>
__device__ __forceinline__ T fetch(const T* g, i64 ld, i64 r0, i64 c0, i64 rows, i64 cols, int r,
                                   int c) {
  const i64 gr = r0 + r;
  const i64 gc = c0 + c;
  if (gr >= rows || gc >= cols) return T(0);
  return kColsContig ? g[gr * ld + gc] : g[gc * ld + gr];
}

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kTile* kTile) prefetch_kernel(simt::Args<T> g, i64 n_tiles) {
  __shared__ T as[kTile][kTile + 1];
  __shared__ T bs[kTile][kTile + 1];
  i64 tm, tn;
  simt::tile_coords(n_tiles, tm, tn);
  const i64 i0 = tm * kTile;
  const i64 j0 = tn * kTile;
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  // Which tile element this thread moves: (ty, tx) along a contiguous row, (tx, ty) otherwise.
  const int ar = TA ? tx : ty, ac = TA ? ty : tx;
  const int br = TB ? tx : ty, bc = TB ? ty : tx;
  T a_next = fetch<!TA>(g.a, g.lda, i0, 0, g.m, g.k, ar, ac);
  T b_next = fetch<!TB>(g.b, g.ldb, 0, j0, g.k, g.n, br, bc);
  T acc = T(0);
  for (i64 p0 = 0; p0 < g.k; p0 += kTile) {
    as[ar][ac] = a_next;
    bs[br][bc] = b_next;
    __syncthreads();
    if (p0 + kTile < g.k) {  // prefetch the next tiles; used after the math below
      a_next = fetch<!TA>(g.a, g.lda, i0, p0 + kTile, g.m, g.k, ar, ac);
      b_next = fetch<!TB>(g.b, g.ldb, p0 + kTile, j0, g.k, g.n, br, bc);
    }
#pragma unroll
    for (int p = 0; p < kTile; ++p) acc += as[ty][p] * bs[p][tx];
    __syncthreads();
  }
  const i64 i = i0 + ty;
  const i64 j = j0 + tx;
  if (i < g.m && j < g.n) simt::store_c(g.c, g.ldc, i, j, acc, g.alpha, g.beta);
}

}  // namespace

cudaError_t launch_gemm_smem_prefetch(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const i64 n_tiles = simt::ceil_div(p.n, kTile);
    const i64 blocks = simt::ceil_div(p.m, kTile) * n_tiles;
    prefetch_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(kTile, kTile), 0, stream>>>(
            simt::make_args<T>(p), n_tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
