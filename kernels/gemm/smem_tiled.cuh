// The shared-memory tiled kernel behind smem_tiled_16, smem_tiled_32 and smem_padded: a TILE x TILE
// block of threads stages TILE x TILE tiles of A' and B' in shared memory, so each element fetched
// from global memory is reused TILE times. PAD extra words per shared row remove the bank conflicts
// of the transposing stores that op(A) = T / op(B) = T loads need (see simt_tile_copy.cuh).
#pragma once

#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_tile_copy.cuh"

namespace matserve::kernels::simt {

template <typename T, bool TA, bool TB, int TILE, int PAD>
__global__ void __launch_bounds__(TILE* TILE) smem_tiled_kernel(Args<T> g, i64 n_tiles) {
  __shared__ T as[TILE][TILE + PAD];  // as[r][p] = A'(i0 + r, p0 + p)
  __shared__ T bs[TILE][TILE + PAD];  // bs[p][c] = B'(p0 + p, j0 + c)
  i64 tm, tn;
  tile_coords(n_tiles, tm, tn);
  const i64 i0 = tm * TILE;
  const i64 j0 = tn * TILE;
  const int tid = threadIdx.y * TILE + threadIdx.x;
  T acc = T(0);
  for (i64 p0 = 0; p0 < g.k; p0 += TILE) {
    copy_tile<TILE, TILE, TILE * TILE, !TA>(&as[0][0], TILE + PAD, 1, g.a, g.lda, i0, p0, g.m, g.k,
                                            tid);
    copy_tile<TILE, TILE, TILE * TILE, !TB>(&bs[0][0], TILE + PAD, 1, g.b, g.ldb, p0, j0, g.k, g.n,
                                            tid);
    __syncthreads();
#pragma unroll 8
    for (int p = 0; p < TILE; ++p) acc += as[threadIdx.y][p] * bs[p][threadIdx.x];
    __syncthreads();
  }
  const i64 i = i0 + threadIdx.y;
  const i64 j = j0 + threadIdx.x;
  if (i < g.m && j < g.n) store_c(g.c, g.ldc, i, j, acc, g.alpha, g.beta);
}

template <int TILE, int PAD, typename F>
cudaError_t launch_smem_tiled(const GemmProblem& p, cudaStream_t stream, F dispatcher) {
  return dispatcher(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const i64 n_tiles = ceil_div(p.n, TILE);
    const i64 blocks = ceil_div(p.m, TILE) * n_tiles;
    smem_tiled_kernel<T, decltype(ta)::value, decltype(tb)::value, TILE, PAD>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(TILE, TILE), 0, stream>>>(make_args<T>(p),
                                                                               n_tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels::simt
