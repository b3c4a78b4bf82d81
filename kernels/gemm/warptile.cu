// Rung: warptiling. The vectorized 2D kernel with one more level of tiling between block and
// thread: each warp owns a 64x64 piece of the 128x128 block tile and its lanes compute 8x16
// results in 1x4 sub-tiles, so a warp's shared reads hit few, neighbouring addresses and every
// operand in registers is reused across 4-16 multiply-adds. k-steps of 16, 128 threads.
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/warptile.cuh"

namespace matserve::kernels {
namespace {

using simt::i64;
// fp32: siboehm's A6000 tuning (128 threads, 8x16 results per lane). fp64: half the results per
// lane (twice the registers each), 256 threads.
template <typename T>
struct Config {
  using type = simt::WarpTile<128, 128, 16, 64, 64, 4, 8, 4, 128, 1>;
};
template <>
struct Config<double> {
  using type = simt::WarpTile<128, 128, 8, 64, 32, 2, 4, 4, 256, 1>;
};

template <typename T, bool TA, bool TB, typename Cfg = typename Config<T>::type>
__global__ void __launch_bounds__(Cfg::NT)
    warptile_kernel(simt::Args<T> g, i64 m_tiles, i64 n_tiles, bool a_vec, bool b_vec, bool c_vec) {
  using S = simt::WarpTileSmem<T, Cfg>;
  __shared__ __align__(16) T as[Cfg::BK * S::kLdA];
  __shared__ __align__(16) T bs[Cfg::BK * S::kLdB];
  i64 tm, tn;
  simt::grouped_tile_coords(m_tiles, n_tiles, tm, tn);
  const i64 i0 = tm * Cfg::BM;
  const i64 j0 = tn * Cfg::BN;
  const int tid = threadIdx.x;
  const simt::LanePos<Cfg> pos(tid);
  T acc[Cfg::WMITER * Cfg::TM][Cfg::WNITER * Cfg::TN] = {};
  for (i64 p0 = 0; p0 < g.k; p0 += Cfg::BK) {
    simt::copy_tile_vec<Cfg::BM, Cfg::BK, Cfg::NT, !TA, TA>(as, 1, S::kLdA, g.a, g.lda, i0, p0, g.m,
                                                            g.k, a_vec, tid);
    simt::copy_tile_vec<Cfg::BK, Cfg::BN, Cfg::NT, !TB, !TB>(bs, S::kLdB, 1, g.b, g.ldb, p0, j0,
                                                             g.k, g.n, b_vec, tid);
    __syncthreads();
    simt::warp_tile_mma<Cfg>(as, bs, pos, acc);
    __syncthreads();
  }
  simt::warp_tile_store<Cfg>(g, i0, j0, pos, acc, c_vec);
}

}  // namespace

cudaError_t launch_gemm_warptile(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    using Cfg = typename Config<T>::type;
    const auto g = simt::make_args<T>(p);
    const i64 m_tiles = simt::ceil_div(p.m, Cfg::BM);
    const i64 n_tiles = simt::ceil_div(p.n, Cfg::BN);
    warptile_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(m_tiles * n_tiles)), dim3(Cfg::NT), 0, stream>>>(
            g, m_tiles, n_tiles, simt::vector_ok(g.a, g.lda), simt::vector_ok(g.b, g.ldb),
            simt::vector_ok(g.c, g.ldc));
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
