// Top rung: warptiling fed by a multi-stage shared-memory ring filled with cp.async. While the
// warps multiply stage t, the copies for stages t+1.. are in flight, so global latency hides
// behind math without staging registers. A k-contiguous A' (which must be transposed into the
// k-major tile) is instead loaded 16 bytes at a time into registers one tile ahead and stored
// after the math. Configurations: 128x128 tiles (k-step 8 or 16) and 64x64 for small or thin C
// (more blocks for 132 SMs); the plain entry chooses by shape, the suffixed entries pin one.
#include "kernels/gemm/simt_cp_async.cuh"
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/warptile.cuh"

namespace matserve::kernels {
namespace {

using simt::i64;
// 128x128 block tiles, 256 threads (8 warps of 64x32), 8x8 results per lane; k-steps of 8 in a
// 4-stage ring (the best of the sweep in docs/benchmarks/gemm-simt.md), or of 16 in 4 stages.
using Big = simt::WarpTile<128, 128, 8, 64, 32, 2, 8, 4, 256, 4>;
using BigK16 = simt::WarpTile<128, 128, 16, 64, 32, 2, 8, 4, 256, 4>;
// The first pipelined configuration: k-steps of 16, 3 stages, everything through cp.async.
using BigCpAsync = simt::WarpTile<128, 128, 16, 64, 32, 2, 8, 4, 256, 3>;
using Small = simt::WarpTile<64, 64, 16, 32, 32, 2, 4, 4, 128, 3>;
using BigF64 = simt::WarpTile<128, 128, 8, 64, 32, 2, 4, 4, 256, 3>;
using SmallF64 = simt::WarpTile<64, 64, 16, 32, 32, 2, 4, 4, 128, 3>;

// kRegStageA: when A' is k-contiguous (a_trans == false) its tile must be transposed on the way to
// the k-major shared layout; instead of 4-byte cp.async copies, each thread then loads 16-byte
// groups of the next tile into registers before the math and stores them after it.
template <typename T, bool TA, bool TB, typename Cfg, bool kRegStageA>
__global__ void __launch_bounds__(Cfg::NT, (Cfg::NT >= 256 && sizeof(T) == 4) ? 2 : 1)
    pipelined_kernel(simt::Args<T> g, i64 m_tiles, i64 n_tiles, bool a_vec, bool b_vec,
                     bool c_vec) {
  constexpr bool kRegA = kRegStageA && !TA;
  using S = simt::WarpTileSmem<T, Cfg>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  i64 tm, tn;
  simt::grouped_tile_coords(m_tiles, n_tiles, tm, tn);
  const i64 i0 = tm * Cfg::BM;
  const i64 j0 = tn * Cfg::BN;
  const int tid = threadIdx.x;
  const simt::LanePos<Cfg> pos(tid);
  const i64 k_tiles = simt::ceil_div(g.k, Cfg::BK);
  auto stage_a = [&](i64 t) { return smem + (t % Cfg::STAGES) * S::kStage; };
  auto stage_b = [&](i64 t) { return stage_a(t) + Cfg::BK * S::kLdA; };

  auto issue = [&](i64 t) {
    const i64 p0 = t * Cfg::BK;
    if constexpr (!kRegA) {
      simt::cp_async_tile<Cfg::BM, Cfg::BK, Cfg::NT, !TA, TA>(stage_a(t), 1, S::kLdA, g.a, g.lda,
                                                              i0, p0, g.m, g.k, a_vec, tid);
    }
    simt::cp_async_tile<Cfg::BK, Cfg::BN, Cfg::NT, !TB, !TB>(stage_b(t), S::kLdB, 1, g.b, g.ldb, p0,
                                                             j0, g.k, g.n, b_vec, tid);
  };
  simt::TileRegs<Cfg::BM, Cfg::BK, Cfg::NT, true, T> a_regs;

  T acc[Cfg::WMITER * Cfg::TM][Cfg::WNITER * Cfg::TN] = {};
  if constexpr (kRegA) {
    a_regs.load(g.a, g.lda, i0, 0, g.m, g.k, a_vec, tid);
    a_regs.store(stage_a(0), 1, S::kLdA, tid);
  }
#pragma unroll
  for (int s = 0; s < Cfg::STAGES - 1; ++s) {
    if (s < k_tiles) issue(s);
    async_copy::commit();  // empty groups keep the count uniform
  }
  for (i64 t = 0; t < k_tiles; ++t) {
    async_copy::wait<Cfg::STAGES - 2>();  // tile t has landed (this thread's copies)
    __syncthreads();  // ... everyone's; and stage (t - 1) % STAGES is free again
    if (t + Cfg::STAGES - 1 < k_tiles) issue(t + Cfg::STAGES - 1);
    async_copy::commit();
    const bool next_a = kRegA && t + 1 < k_tiles;
    if (next_a) a_regs.load(g.a, g.lda, i0, (t + 1) * Cfg::BK, g.m, g.k, a_vec, tid);
    simt::warp_tile_mma<Cfg>(stage_a(t), stage_b(t), pos, acc);
    // Stage (t + 1) % STAGES last held tile t + 1 - STAGES, finished before this iteration's
    // barrier; the next iteration's barrier publishes these stores.
    if (next_a) a_regs.store(stage_a(t + 1), 1, S::kLdA, tid);
  }
  async_copy::wait<0>();
  simt::warp_tile_store<Cfg>(g, i0, j0, pos, acc, c_vec);
}

template <typename Cfg, typename T, bool TA, bool TB, bool kRegStageA = false>
cudaError_t run(const GemmProblem& p, cudaStream_t stream) {
  using S = simt::WarpTileSmem<T, Cfg>;
  auto* kernel = &pipelined_kernel<T, TA, TB, Cfg, kRegStageA>;
  static const cudaError_t attr = simt::allow_smem(kernel, S::kBytes);  // once per instantiation
  if (attr != cudaSuccess) return attr;
  const auto g = simt::make_args<T>(p);
  const i64 m_tiles = simt::ceil_div(p.m, Cfg::BM);
  const i64 n_tiles = simt::ceil_div(p.n, Cfg::BN);
  kernel<<<dim3(static_cast<unsigned>(m_tiles * n_tiles)), dim3(Cfg::NT), S::kBytes, stream>>>(
      g, m_tiles, n_tiles, simt::vector_ok(g.a, g.lda), simt::vector_ok(g.b, g.ldb),
      simt::vector_ok(g.c, g.ldc));
  return cudaGetLastError();
}

// Big tiles only when they alone give every SM (132 on the H100) at least one block.
bool big_tiles(const GemmProblem& p) {
  return simt::ceil_div(p.m, 128) * simt::ceil_div(p.n, 128) >= 132;
}

}  // namespace

cudaError_t launch_gemm_simt_pipelined(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    constexpr bool kTA = decltype(ta)::value, kTB = decltype(tb)::value;
    if constexpr (std::is_same_v<T, double>) {
      return big_tiles(p) ? run<BigF64, T, kTA, kTB>(p, stream)
                          : run<SmallF64, T, kTA, kTB>(p, stream);
    } else {
      return big_tiles(p) ? run<Big, T, kTA, kTB, true>(p, stream)
                          : run<Small, T, kTA, kTB>(p, stream);
    }
  });
}

cudaError_t launch_gemm_simt_pipelined_128x128(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    return run<Big, decltype(t), decltype(ta)::value, decltype(tb)::value, true>(p, stream);
  });
}

cudaError_t launch_gemm_simt_pipelined_128x128_k16(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    return run<BigK16, decltype(t), decltype(ta)::value, decltype(tb)::value, true>(p, stream);
  });
}

cudaError_t launch_gemm_simt_pipelined_128x128_cpasync(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    return run<BigCpAsync, decltype(t), decltype(ta)::value, decltype(tb)::value>(p, stream);
  });
}

cudaError_t launch_gemm_simt_pipelined_64x64(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_f32(p, [&](auto t, auto ta, auto tb) {
    return run<Small, decltype(t), decltype(ta)::value, decltype(tb)::value>(p, stream);
  });
}

}  // namespace matserve::kernels
