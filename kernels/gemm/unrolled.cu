// Rung 2, loop unrolling: the naive kernel with its k loop unrolled by four into four independent
// partial sums. Fewer loop branches and four loads in flight per thread instead of one hide some
// latency; the access pattern (uncoalesced, one thread per element) is still the naive one.
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_kernels.h"

namespace matserve::kernels {
namespace {

using simt::i64;
constexpr int kBlock = 32;

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kBlock* kBlock) unrolled_kernel(simt::Args<T> g, i64 n_tiles) {
  i64 tm, tn;
  simt::tile_coords(n_tiles, tm, tn);
  const i64 i = tm * kBlock + threadIdx.x;
  const i64 j = tn * kBlock + threadIdx.y;
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

cudaError_t launch_gemm_unrolled(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const i64 n_tiles = simt::ceil_div(p.n, kBlock);
    const i64 blocks = simt::ceil_div(p.m, kBlock) * n_tiles;
    unrolled_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(kBlock, kBlock), 0, stream>>>(
            simt::make_args<T>(p), n_tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
