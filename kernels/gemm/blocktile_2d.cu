// Rung: 2D block tiling (the seeds' TILESCALE). A 256-thread block computes a 128x128 tile of C;
// each thread an 8x8 sub-tile from 8 values of A' and 8 of B' it holds in registers per k step
// (an outer product): 64 multiply-adds per 16 shared loads instead of 8 per 9 in the 1D rung.
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/simt_tile_copy.cuh"

namespace matserve::kernels {
namespace {

using simt::i64;
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // 256

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads) blocktile_2d_kernel(simt::Args<T> g, i64 n_tiles) {
  __shared__ T as[kBM * kBK];  // as[r * kBK + p]
  __shared__ T bs[kBK * kBN];  // bs[p * kBN + c]
  i64 tm, tn;
  simt::tile_coords(n_tiles, tm, tn);
  const i64 i0 = tm * kBM;
  const i64 j0 = tn * kBN;
  const int tid = threadIdx.x;
  const int tc = tid % (kBN / kTN);
  const int tr = tid / (kBN / kTN);
  T acc[kTM][kTN] = {};
  T reg_m[kTM], reg_n[kTN];
  for (i64 p0 = 0; p0 < g.k; p0 += kBK) {
    simt::copy_tile<kBM, kBK, kThreads, !TA>(as, kBK, 1, g.a, g.lda, i0, p0, g.m, g.k, tid);
    simt::copy_tile<kBK, kBN, kThreads, !TB>(bs, kBN, 1, g.b, g.ldb, p0, j0, g.k, g.n, tid);
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kBK; ++p) {
#pragma unroll
      for (int t = 0; t < kTM; ++t) reg_m[t] = as[(tr * kTM + t) * kBK + p];
#pragma unroll
      for (int t = 0; t < kTN; ++t) reg_n[t] = bs[p * kBN + tc * kTN + t];
#pragma unroll
      for (int x = 0; x < kTM; ++x) {
#pragma unroll
        for (int y = 0; y < kTN; ++y) acc[x][y] += reg_m[x] * reg_n[y];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int x = 0; x < kTM; ++x) {
    const i64 i = i0 + tr * kTM + x;
    if (i >= g.m) break;
#pragma unroll
    for (int y = 0; y < kTN; ++y) {
      const i64 j = j0 + tc * kTN + y;
      if (j < g.n) simt::store_c(g.c, g.ldc, i, j, acc[x][y], g.alpha, g.beta);
    }
  }
}

}  // namespace

cudaError_t launch_gemm_blocktile_2d(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const i64 n_tiles = simt::ceil_div(p.n, kBN);
    const i64 blocks = simt::ceil_div(p.m, kBM) * n_tiles;
    blocktile_2d_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream>>>(simt::make_args<T>(p),
                                                                             n_tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
