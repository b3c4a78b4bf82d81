// fp64 CUDA-core GEMM shaped for the fp64 pipes (issue 4). Technique: 8x12 doubles per lane (192
// accumulator registers) fed by a 4-stage cp.async ring straight into shared memory (no staging
// registers, which is what lets 8x12 fit under 255 registers). Why it was meant to be faster than
// simt_tuned: shared memory returns 16 doubles per cycle per SM against 64 DFMA lanes, so 8x8
// lanes need as many shared cycles as fp64-pipe cycles; 8x12 needs 17% fewer. Measured on the
// H100 (docs/benchmarks/gemm-simt.md): it is not faster (shared memory was not the limit).
#include "kernels/gemm/simt_cp_async.cuh"
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/warptile.cuh"

namespace matserve::kernels {
namespace {

using simt::i64;
using V2 = double2;

}  // namespace
namespace simt {
// One 8-byte element, always inside (no src-size operand).
__device__ __forceinline__ void cp_async_8(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
}
}  // namespace simt
namespace {

// BM x BN block tile, k-tiles of BK, STAGES-deep cp.async ring, WARPS_M x WARPS_N warps; LM
// lanes along m (32 / LM along n); a lane owns RM x RN blocks of 2x2 doubles, strided by 2 * LM
// (2 * LN) so that a warp's shared reads are neighbouring 16-byte vectors (conflict-free LDS.128).
// kPrefetch: the next k-step's fragments are loaded before this step's DFMAs (needs 2x the
// fragment registers; only the 8x8 lane tile has them).
template <int BM_, int BN_, int BK_, int STAGES_, int WARPS_M_, int WARPS_N_, int LM_, int RM_,
          int RN_, bool kPrefetch_>
struct F64Config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, LM = LM_, LN = 32 / LM_;
  static constexpr int RM = RM_, RN = RN_, TM = 2 * RM_, TN = 2 * RN_;
  static constexpr bool kPrefetch = kPrefetch_;
  static constexpr int NT = WARPS_M * WARPS_N * 32;
  static_assert(TM * LM * WARPS_M == BM && TN * LN * WARPS_N == BN, "tile mismatch");
  // Rows of the k-major shared tiles, padded to 2 (mod 16) doubles: the transposing 8-byte
  // copies of a half-warp (8 k values x 2 rows) then hit 16 distinct bank pairs.
  static constexpr int kLdA = BM + 2, kLdB = BN + 2;
  static_assert(BM % 16 == 0 && BN % 16 == 0, "pad rule assumes multiples of 16");
  static constexpr int kStage = BK * (kLdA + kLdB);
  static constexpr int kBytes = STAGES * kStage * static_cast<int>(sizeof(double));
};

// This thread's cp.async copies of one ROWS x COLS tile of X (X(r, c) = g[r * ld + c] when
// kColsContig, else g[c * ld + r]; `g` points at the tile's origin) into s[r * s_row + c * s_col].
// Pairs of doubles along X's contiguous index: one 16-byte copy when kStoreVec (shared memory is
// contiguous along the same index), the pair is inside and vec_ok; else two 8-byte copies, zero
// filled outside (rows_left, cols_left). 32-bit tile coordinates keep the register cost low: this
// runs next to 232 live registers of accumulators and fragments.
template <int ROWS, int COLS, int NT, bool kColsContig, bool kStoreVec>
__device__ __forceinline__ void copy_tile(double* s, int s_row, int s_col, const double* g, i64 ld,
                                          int rows_left, int cols_left, bool vec_ok, int tid) {
  constexpr int kContig = kColsContig ? COLS : ROWS;
  constexpr int kG = kContig / 2;  // pairs per line
  constexpr int kGroups = kG * (kColsContig ? ROWS : COLS);
  static_assert(kContig % 2 == 0 && kGroups % NT == 0, "tile must split evenly into pairs");
#pragma unroll
  for (int it = 0; it < kGroups / NT; ++it) {
    const int e = it * NT + tid;
    const int q = (e % kG) * 2;  // along the contiguous index
    const int o = e / kG;        // along the other one
    const int r = kColsContig ? o : q;
    const int c = kColsContig ? q : o;
    const int lim_o = kColsContig ? rows_left : cols_left;
    const int lim_q = kColsContig ? cols_left : rows_left;
    const double* src = g + o * ld + q;
    double* dst = s + r * s_row + c * s_col;
    if (kStoreVec && vec_ok && o < lim_o && q + 2 <= lim_q) {
      simt::cp_async_16(dst, src);
    } else {
      const int step = kColsContig ? s_col : s_row;
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        const bool inside = o < lim_o && q + w < lim_q;
        simt::cp_async_elem(dst + w * step, inside ? src + w : g,
                            inside);  // g: the tile origin, inside
      }
    }
  }
}

// The unchecked copy of a full tile inside the matrix (interior blocks, full k-tiles, aligned
// operands), at a few instructions per copy: this thread's pairs sit at compile-time offsets from
// one global pointer (bumped once per k-tile) and one shared offset. Pairs of a line are dealt in
// chunks of CH = gcd(pairs per line, NT), so every thread has the same pattern (a 192-long line
// has 96 pairs: three chunks of 32).
template <int ROWS, int COLS, int NT, bool kColsContig, bool kStoreVec, int S_ROW, int S_COL>
struct FastCopy {
  static constexpr int kContig = kColsContig ? COLS : ROWS;
  static constexpr int kOther = kColsContig ? ROWS : COLS;
  static constexpr int kG = kContig / 2;
  static constexpr int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }
  static constexpr int CH = gcd(kG, NT);
  static constexpr int LP = NT / CH;  // lines per pass
  static_assert(kOther % LP == 0, "tile must split evenly");

  // This thread's first pair: line tid / CH, offset (tid % CH) * 2 along the line.
  __device__ static int line(int tid) { return tid / CH; }
  __device__ static int offset(int tid) { return (tid % CH) * 2; }
  __device__ static int smem_offset(int tid) {
    return kColsContig ? line(tid) * S_ROW + offset(tid) * S_COL
                       : offset(tid) * S_ROW + line(tid) * S_COL;
  }

  // s: this thread's first pair in the slot; g: its first pair in global memory.
  __device__ __forceinline__ static void copy(double* s, const double* g, i64 ld) {
#pragma unroll
    for (int pass = 0; pass < kOther / LP; ++pass) {
      const double* gl = g + pass * LP * ld;
#pragma unroll
      for (int ch = 0; ch < kG / CH; ++ch) {
        const int o = pass * LP, q = ch * 2 * CH;
        double* dst = s + (kColsContig ? o * S_ROW + q * S_COL : q * S_ROW + o * S_COL);
        if constexpr (kStoreVec) {
          simt::cp_async_16(dst, gl + q);
        } else {
          constexpr int kStep = kColsContig ? S_COL : S_ROW;  // shared step along the pair
          simt::cp_async_8(dst, gl + q);
          simt::cp_async_8(dst + kStep, gl + q + 1);
        }
      }
    }
  }
};

// acc += the block's product over all of k. kInterior: the block's tile lies inside C and both
// operands allow 16-byte copies, so every full k-tile takes FastCopy. A partial k-tile (if any)
// goes first, guarded, so that the remaining tiles are full.
template <bool kInterior, bool TA, bool TB, typename C>
__device__ __forceinline__ void f64_mainloop(const simt::Args<double>& g, double* smem, i64 i0,
                                             i64 j0, int tid, int row0, int col0, bool a_vec,
                                             bool b_vec, double (&acc)[C::TM][C::TN]) {
  constexpr int BK = C::BK, STAGES = C::STAGES;
  const int k_tiles = static_cast<int>(simt::ceil_div(g.k, BK));
  const bool tail = g.k % BK != 0;  // then sequence step 0 is k-tile k_tiles - 1

  // A' k-major (as[p * kLdA + i]), B' (bs[p * kLdB + j]). A k-contiguous operand goes element by
  // element (8-byte copies transpose it on the way); an operand contiguous along the shared rows
  // goes in 16-byte copies.
  using FA = FastCopy<C::BM, BK, C::NT, !TA, TA, 1, C::kLdA>;
  using FB = FastCopy<BK, C::BN, C::NT, !TB, !TB, C::kLdB, 1>;
  // Fast-path pointers at this thread's first pair of k-tile 0, bumped by one k-tile per copy.
  const double* pa = g.a + (TA ? FA::line(tid) * g.lda + i0 + FA::offset(tid)
                               : (i0 + FA::line(tid)) * g.lda + FA::offset(tid));
  const double* pb = g.b + (TB ? (j0 + FB::line(tid)) * g.ldb + FB::offset(tid)
                               : FB::line(tid) * g.ldb + j0 + FB::offset(tid));
  double* const sa0 = smem + FA::smem_offset(tid);
  double* const sb0 = smem + BK * C::kLdA + FB::smem_offset(tid);
  auto load_fast = [&](int slot) {
    FA::copy(sa0 + slot * C::kStage, pa, g.lda);
    FB::copy(sb0 + slot * C::kStage, pb, g.ldb);
    pa += TA ? BK * g.lda : BK;
    pb += TB ? BK : BK * g.ldb;
  };
  auto clamp = [](i64 v) { return static_cast<int>(v < (1 << 30) ? v : (1 << 30)); };
  const int m_left = clamp(g.m - i0), n_left = clamp(g.n - j0);
  auto load_guarded = [&](int step, int slot) {
    const int t = tail ? (step == 0 ? k_tiles - 1 : step - 1) : step;
    double* as = smem + slot * C::kStage;
    double* bs = as + BK * C::kLdA;
    const i64 p0 = static_cast<i64>(t) * BK;
    const int k_left = clamp(g.k - p0);
    copy_tile<C::BM, BK, C::NT, !TA, TA>(as, 1, C::kLdA,
                                         g.a + (TA ? p0 * g.lda + i0 : i0 * g.lda + p0), g.lda,
                                         m_left, k_left, a_vec, tid);
    copy_tile<BK, C::BN, C::NT, !TB, !TB>(bs, C::kLdB, 1,
                                          g.b + (TB ? j0 * g.ldb + p0 : p0 * g.ldb + j0), g.ldb,
                                          k_left, n_left, b_vec, tid);
  };

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) {
      if (kInterior && !(tail && s == 0)) {
        load_fast(s);
      } else {
        load_guarded(s, s);
      }
    }
    simt::cp_async_commit();
  }
  simt::cp_async_wait<STAGES - 2>();
  __syncthreads();

  double fa[C::kPrefetch ? 2 : 1][C::TM];
  double fb[C::kPrefetch ? 2 : 1][C::TN];
  auto load_frags = [&](int buf, const double* as, const double* bs, int p) {
#pragma unroll
    for (int r = 0; r < C::RM; ++r) {
      *reinterpret_cast<V2*>(&fa[buf][2 * r]) =
          *reinterpret_cast<const V2*>(&as[p * C::kLdA + r * 2 * C::LM]);
    }
#pragma unroll
    for (int r = 0; r < C::RN; ++r) {
      *reinterpret_cast<V2*>(&fb[buf][2 * r]) =
          *reinterpret_cast<const V2*>(&bs[p * C::kLdB + r * 2 * C::LN]);
    }
  };

  int read_slot = 0, write_slot = STAGES - 1;
  for (int t = 0; t < k_tiles; ++t) {
    // Slot write_slot was read in iteration t - 1, which every thread finished (barrier below).
    if (t + STAGES - 1 < k_tiles) {
      if constexpr (kInterior) {
        load_fast(write_slot);
      } else {
        load_guarded(t + STAGES - 1, write_slot);
      }
    }
    simt::cp_async_commit();
    const double* as = smem + read_slot * C::kStage + row0;
    const double* bs = smem + read_slot * C::kStage + BK * C::kLdA + col0;
    if constexpr (C::kPrefetch) load_frags(0, as, bs, 0);
#pragma unroll
    for (int p = 0; p < BK; ++p) {
      int buf = 0;
      if constexpr (C::kPrefetch) {
        buf = p % 2;
        if (p + 1 < BK) load_frags((p + 1) % 2, as, bs, p + 1);
      } else {
        load_frags(0, as, bs, p);
      }
#pragma unroll
      for (int x = 0; x < C::TM; ++x) {
#pragma unroll
        for (int y = 0; y < C::TN; ++y) acc[x][y] = fma(fa[buf][x], fb[buf][y], acc[x][y]);
      }
    }
    simt::cp_async_wait<STAGES - 2>();  // k-tile t + 1 has landed (this thread's copies)
    __syncthreads();                    // ... everyone's; and slot read_slot is free again
    read_slot = read_slot + 1 == STAGES ? 0 : read_slot + 1;
    write_slot = write_slot + 1 == STAGES ? 0 : write_slot + 1;
  }
}

template <bool TA, bool TB, typename C>
__global__ void __launch_bounds__(C::NT, 1)
    f64_kernel(simt::Args<double> g, i64 m_tiles, i64 n_tiles, bool a_vec, bool b_vec, bool c_vec) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  double* const smem = reinterpret_cast<double*>(smem_raw);
  i64 tm, tn;
  simt::grouped_tile_coords(m_tiles, n_tiles, tm, tn);
  const i64 i0 = tm * C::BM;
  const i64 j0 = tn * C::BN;
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int row0 = (warp / C::WARPS_N) * (C::TM * C::LM) + (lane % C::LM) * 2;
  const int col0 = (warp % C::WARPS_N) * (C::TN * C::LN) + (lane / C::LM) * 2;

  double acc[C::TM][C::TN];
#pragma unroll
  for (int x = 0; x < C::TM; ++x) {
#pragma unroll
    for (int y = 0; y < C::TN; ++y) acc[x][y] = 0.0;
  }
  if (a_vec && b_vec && i0 + C::BM <= g.m && j0 + C::BN <= g.n) {
    f64_mainloop<true, TA, TB, C>(g, smem, i0, j0, tid, row0, col0, a_vec, b_vec, acc);
  } else {
    f64_mainloop<false, TA, TB, C>(g, smem, i0, j0, tid, row0, col0, a_vec, b_vec, acc);
  }

#pragma unroll
  for (int rm = 0; rm < C::RM; ++rm) {
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const i64 i = i0 + row0 + rm * 2 * C::LM + w;
#pragma unroll
      for (int rn = 0; rn < C::RN; ++rn) {
        simt::store_c_row<2>(g, i, j0 + col0 + rn * 2 * C::LN, &acc[rm * 2 + w][rn * 2], c_vec);
      }
    }
  }
}

// 128x192 tiles, 8 warps of 32x96 (lanes 4 along m x 8 along n), 8x12 doubles per lane, k-tiles
// of 8 in a 4-stage ring (83 KB of shared memory), one block per SM. (192x128 tiles with 12x8
// lanes spilled 8-108 bytes; with k-tiles of 16 in 3 stages, 170-240 bytes: not offered.)
using Wide = F64Config<128, 192, 8, 4, 4, 2, 4, 4, 6, false>;
// 128x128 tiles, 8x8 doubles per lane with prefetched fragments (simt_tuned's shape, fed by
// cp.async instead of register staging): fewer partial waves where 192-row tiles quantize badly.
using Square = F64Config<128, 128, 8, 4, 2, 4, 8, 4, 4, true>;

int sm_count() {
  int dev = 0, count = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    return 132;
  }
  return count;
}

template <typename C, bool TA, bool TB>
cudaError_t run(const GemmProblem& p, cudaStream_t stream) {
  auto* kernel = &f64_kernel<TA, TB, C>;
  static const cudaError_t attr = simt::allow_smem(kernel, C::kBytes);  // once per instantiation
  if (attr != cudaSuccess) return attr;
  const auto g = simt::make_args<double>(p);
  const i64 m_tiles = simt::ceil_div(p.m, C::BM);
  const i64 n_tiles = simt::ceil_div(p.n, C::BN);
  kernel<<<dim3(static_cast<unsigned>(m_tiles * n_tiles)), dim3(C::NT), C::kBytes, stream>>>(
      g, m_tiles, n_tiles, simt::vector_ok(g.a, g.lda), simt::vector_ok(g.b, g.ldb),
      simt::vector_ok(g.c, g.ldc));
  return cudaGetLastError();
}

template <typename C>
cudaError_t run_config(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch_orders<double>(p, [&](auto, auto ta, auto tb) {
    return run<C, decltype(ta)::value, decltype(tb)::value>(p, stream);
  });
}

// Modelled time of a configuration: whole waves of one block per SM, each block's cost its
// tile's area over the configuration's relative speed per result.
double modelled_cost(const GemmProblem& p, i64 bm, i64 bn, double speed) {
  static const int sms = sm_count();
  const i64 tiles = simt::ceil_div(p.m, bm) * simt::ceil_div(p.n, bn);
  return static_cast<double>(simt::ceil_div(tiles, sms)) * static_cast<double>(bm * bn) / speed;
}

}  // namespace

cudaError_t launch_gemm_simt_f64(const GemmProblem& p, cudaStream_t stream) {
  if (p.precision != Precision::kF64) return cudaErrorInvalidValue;
  // Under about three quarters of a wave of 128x128 tiles: simt_tuned's 64x64 tiles fill the SMs.
  if (simt::ceil_div(p.m, 128) * simt::ceil_div(p.n, 128) < 96) {
    return launch_gemm_simt_tuned_64x64(p, stream);
  }
  // kWideSpeed: Wide's throughput per result relative to Square's in full waves (H100, 8192^3:
  // 22.6 / 21.3 TFLOP/s, docs/benchmarks/gemm-simt.md).
  constexpr double kWideSpeed = 1.06;
  return modelled_cost(p, Wide::BM, Wide::BN, kWideSpeed) <=
                 modelled_cost(p, Square::BM, Square::BN, 1.0)
             ? run_config<Wide>(p, stream)
             : run_config<Square>(p, stream);
}

cudaError_t launch_gemm_simt_f64_128x192(const GemmProblem& p, cudaStream_t stream) {
  if (p.precision != Precision::kF64) return cudaErrorInvalidValue;
  return run_config<Wide>(p, stream);
}

cudaError_t launch_gemm_simt_f64_128x128(const GemmProblem& p, cudaStream_t stream) {
  if (p.precision != Precision::kF64) return cudaErrorInvalidValue;
  return run_config<Square>(p, stream);
}

}  // namespace matserve::kernels
