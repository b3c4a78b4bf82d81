// Rung 1, naive: one thread per element of C, each walking the full k loop straight from global
// memory. threadIdx.x runs down a column of C (consecutive threads on consecutive rows), so a warp
// touches 32 rows of A' and 32 rows of C: no access is coalesced. The baseline every rung beats.
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_kernels.h"

namespace matserve::kernels {
namespace {

using simt::i64;
constexpr int kBlock = 32;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kBlock* kBlock) naive_kernel(simt::Args<T> g, i64 n_tiles) {
  i64 tm, tn;
  simt::tile_coords(n_tiles, tm, tn);
  const i64 i = tm * kBlock + threadIdx.x;  // consecutive threads: consecutive rows
  const i64 j = tn * kBlock + threadIdx.y;
  if (i >= g.m || j >= g.n) return;
  T acc = T(0);
  for (i64 p = 0; p < g.k; ++p) {
    acc += simt::load_a<TA>(g.a, g.lda, i, p) * simt::load_b<TB>(g.b, g.ldb, p, j);
  }
  simt::store_c(g.c, g.ldc, i, j, acc, g.alpha, g.beta);
}

}  // namespace

cudaError_t launch_gemm_naive(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const i64 n_tiles = simt::ceil_div(p.n, kBlock);
    const i64 blocks = simt::ceil_div(p.m, kBlock) * n_tiles;
    naive_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(kBlock, kBlock), 0, stream>>>(
            simt::make_args<T>(p), n_tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
