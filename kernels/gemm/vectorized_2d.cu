// Rung: vectorized 2D block tiling. The 2D block-tiled kernel with A' stored transposed in shared
// memory (k-major, like B'), so each thread fetches its 8 values of A' and of B' per k step with
// 16-byte shared loads; global loads and C stores are 16 bytes wide too. Fewer, wider memory
// instructions per flop. 16-byte paths need alignment (checked at run time: base % 16, ld % 4);
// misaligned operands and tile edges fall back to element loads/stores, never refused.
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/simt_tile_copy.cuh"

namespace matserve::kernels {
namespace {

using simt::i64;
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // 256

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(kThreads)
    vectorized_2d_kernel(simt::Args<T> g, i64 n_tiles, bool a_vec, bool b_vec, bool c_vec) {
  using V = typename simt::Vec<T>::type;
  constexpr int W = simt::Vec<T>::kWidth;
  __shared__ __align__(16) T as[kBK * kBM];  // as[p * kBM + r]: transposed
  __shared__ __align__(16) T bs[kBK * kBN];  // bs[p * kBN + c]
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
    simt::copy_tile_vec<kBM, kBK, kThreads, !TA, TA>(as, 1, kBM, g.a, g.lda, i0, p0, g.m, g.k,
                                                     a_vec, tid);
    simt::copy_tile_vec<kBK, kBN, kThreads, !TB, !TB>(bs, kBN, 1, g.b, g.ldb, p0, j0, g.k, g.n,
                                                      b_vec, tid);
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kBK; ++p) {
#pragma unroll
      for (int t = 0; t < kTM; t += W) {
        *reinterpret_cast<V*>(&reg_m[t]) = *reinterpret_cast<const V*>(&as[p * kBM + tr * kTM + t]);
      }
#pragma unroll
      for (int t = 0; t < kTN; t += W) {
        *reinterpret_cast<V*>(&reg_n[t]) = *reinterpret_cast<const V*>(&bs[p * kBN + tc * kTN + t]);
      }
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
    simt::store_c_row<kTN>(g, i0 + tr * kTM + x, j0 + tc * kTN, acc[x], c_vec);
  }
}

}  // namespace

cudaError_t launch_gemm_vectorized_2d(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    const auto g = simt::make_args<T>(p);
    const i64 n_tiles = simt::ceil_div(p.n, kBN);
    const i64 blocks = simt::ceil_div(p.m, kBM) * n_tiles;
    vectorized_2d_kernel<T, decltype(ta)::value, decltype(tb)::value>
        <<<dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream>>>(
            g, n_tiles, simt::vector_ok(g.a, g.lda), simt::vector_ok(g.b, g.ldb),
            simt::vector_ok(g.c, g.ldc));
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
