// Rung: 1D block tiling. A 512-thread block computes a 64x64 tile of C with k-steps of 8; each
// thread computes TM = 8 results down one column, so every B' value it reads from shared memory
// feeds 8 multiply-adds held in registers. Fewer shared loads per flop than one-result threads.
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/simt_tile_copy.cuh"

namespace matserve::kernels {
namespace {

using simt::i64;
constexpr int kBM = 64, kBN = 64, kBK = 8, kTM = 8;
constexpr int kThreads = kBM * kBN / kTM;  // 512

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads) blocktile_1d_kernel(simt::Args<T> g, i64 n_tiles) {
  __shared__ T as[kBM * kBK];  // as[r * kBK + p]
  __shared__ T bs[kBK * kBN];  // bs[p * kBN + c]
  i64 tm, tn;
  simt::tile_coords(n_tiles, tm, tn);
  const i64 i0 = tm * kBM;
  const i64 j0 = tn * kBN;
  const int tid = threadIdx.x;
  const int tc = tid % kBN;
  const int tr = tid / kBN;  // rows tr * kTM .. + kTM
  T acc[kTM] = {};
  for (i64 p0 = 0; p0 < g.k; p0 += kBK) {
    simt::copy_tile<kBM, kBK, kThreads, !TA>(as, kBK, 1, g.a, g.lda, i0, p0, g.m, g.k, tid);
    simt::copy_tile<kBK, kBN, kThreads, !TB>(bs, kBN, 1, g.b, g.ldb, p0, j0, g.k, g.n, tid);
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kBK; ++p) {
      const T b = bs[p * kBN + tc];
#pragma unroll
      for (int t = 0; t < kTM; ++t) acc[t] += as[(tr * kTM + t) * kBK + p] * b;
    }
    __syncthreads();
  }
  const i64 j = j0 + tc;
  if (j >= g.n) return;
#pragma unroll
  for (int t = 0; t < kTM; ++t) {
    const i64 i = i0 + tr * kTM + t;
    if (i < g.m) simt::store_c(g.c, g.ldc, i, j, acc[t], g.alpha, g.beta);
  }
}

}  // namespace

cudaError_t launch_gemm_blocktile_1d(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const i64 n_tiles = simt::ceil_div(p.n, kBN);
    const i64 blocks = simt::ceil_div(p.m, kBM) * n_tiles;
    blocktile_1d_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream>>>(simt::make_args<T>(p),
                                                                             n_tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
