// Rung: register privatization. A 32x32 block of threads computes a 32x64 tile of C:
// each thread keeps two results in private registers and, per k step, reads its A' element from
// shared memory once into a register and uses it for both. One A' tile now serves two B' tiles,
// halving A' traffic per flop, and every shared read of A' feeds two multiply-adds.
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/simt_tile_copy.cuh"

namespace matserve::kernels {
namespace {

using simt::i64;
constexpr int kTile = 32;
constexpr int kReg = 2;  // outputs per thread, kTile columns apart

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kTile* kTile) reg_private_kernel(simt::Args<T> g, i64 n_tiles) {
  __shared__ T as[kTile][kTile + 1];
  __shared__ T bs[kTile][kReg * kTile + 1];
  i64 tm, tn;
  simt::tile_coords(n_tiles, tm, tn);
  const i64 i0 = tm * kTile;
  const i64 j0 = tn * kTile * kReg;
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const int tid = ty * kTile + tx;
  T acc[kReg] = {};
  for (i64 p0 = 0; p0 < g.k; p0 += kTile) {
    simt::copy_tile<kTile, kTile, kTile * kTile, !TA>(&as[0][0], kTile + 1, 1, g.a, g.lda, i0, p0,
                                                      g.m, g.k, tid);
    simt::copy_tile<kTile, kReg * kTile, kTile * kTile, !TB>(&bs[0][0], kReg * kTile + 1, 1, g.b,
                                                             g.ldb, p0, j0, g.k, g.n, tid);
    __syncthreads();
#pragma unroll 8
    for (int p = 0; p < kTile; ++p) {
      const T a = as[ty][p];  // private copy, reused kReg times
#pragma unroll
      for (int r = 0; r < kReg; ++r) acc[r] += a * bs[p][r * kTile + tx];
    }
    __syncthreads();
  }
  const i64 i = i0 + ty;
#pragma unroll
  for (int r = 0; r < kReg; ++r) {
    const i64 j = j0 + r * kTile + tx;
    if (i < g.m && j < g.n) simt::store_c(g.c, g.ldc, i, j, acc[r], g.alpha, g.beta);
  }
}

}  // namespace

cudaError_t launch_gemm_reg_private(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const i64 n_tiles = simt::ceil_div(p.n, kTile * kReg);
    const i64 blocks = simt::ceil_div(p.m, kTile) * n_tiles;
    reg_private_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(kTile, kTile), 0, stream>>>(
            simt::make_args<T>(p), n_tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
