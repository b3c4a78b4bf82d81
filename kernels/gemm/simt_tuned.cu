// Past the top rung: the simt_pipelined warp tiling rewritten for issue rate. The kernel is bound
// by instruction issue (an FFMA must issue every cycle on every scheduler), so every non-FFMA
// instruction in the k loop is removed or amortised: (1) lanes own vector-wide strips of C laid
// out so that each warp's shared reads are consecutive 16-byte vectors (conflict-free LDS.128);
// (2) A'/B' fragments are double-buffered in registers across the k-step (the loads of step p+1
// fly during the FFMAs of step p); (3) global tiles go LDG.128 -> registers -> STS into a
// two-stage shared ring, with one barrier per k-tile; (4) blocks whose tile lies inside C, with
// aligned operands, copy full k-tiles with 32-bit offsets from pointers bumped once per tile and no
// bounds checks; edge blocks and the last partial k-tile take a guarded path (zero fill); (5) the
// lane's FMAs walk its tile in zig-zag order (rows alternate direction), so that consecutive FMAs
// share an operand that the register reuse cache can feed (an FMA reading all three operands from
// the register file can cost an extra cycle): fp32 +2-3% on the H100 (gemm-simt.md).
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/warptile.cuh"

namespace matserve::kernels {
namespace {

using simt::i64;
using simt::Vec;

// BM x BN block tile, k-steps of BK; WARPS_M x WARPS_N warps; LM lanes along m (32 / LM along n);
// each lane owns RM x RN blocks of W x W results (W = 16 bytes of T), strided so that the LM
// (LN) lanes of a warp read neighbouring vectors.
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int LM_, int RM_, int RN_,
          int MIN_BLOCKS_>
struct Tuned {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int LM = LM_, LN = 32 / LM_, RM = RM_, RN = RN_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int NT = WARPS_M * WARPS_N * 32;
};

template <typename T, typename C>
struct TileLayout {
  static constexpr int W = Vec<T>::kWidth;
  static constexpr int TM = C::RM * W, TN = C::RN * W;      // results per lane along m, n
  static constexpr int WTM = TM * C::LM, WTN = TN * C::LN;  // warp tile
  static_assert(WTM * C::WARPS_M == C::BM && WTN * C::WARPS_N == C::BN, "tile mismatch");
  static constexpr int kLdA = C::BM + W;  // as[p * kLdA + i]; the pad makes transposing
  static constexpr int kLdB = C::BN + W;  // stores conflict-free
  static constexpr int kStage = C::BK * (kLdA + kLdB);
  static constexpr int kBytes = 2 * kStage * static_cast<int>(sizeof(T));
};

// One thread's share of a ROWS x COLS tile of X (X(r, c) = g[r * ld + c] when kColsContig, else
// g[c * ld + r]), staged in registers on its way to a shared tile s[r * s_row + c * s_col] whose
// contiguous index is c when kSmemCols. 16-byte groups along X's contiguous index; the shared
// store is one 16-byte store when both contiguous indices agree, W scalar stores otherwise.
template <typename T, int ROWS, int COLS, int NT, bool kColsContig, bool kSmemCols>
struct Stager {
  using V = typename Vec<T>::type;
  static constexpr int W = Vec<T>::kWidth;
  static constexpr int kContig = kColsContig ? COLS : ROWS;
  static constexpr int kG = kContig / W;  // groups per line
  static_assert(kContig % W == 0 && NT % kG == 0, "tile must split evenly");
  static constexpr int kLinesPerPass = NT / kG;
  static constexpr int kPer = (ROWS * COLS / W) / NT;
  static_assert(kPer >= 1 && (ROWS * COLS / W) % NT == 0, "tile must split evenly");
  static constexpr bool kVecStore = kColsContig == kSmemCols;

  V v[kPer];
  int o, q;  // this thread's line and offset in the first pass

  __device__ explicit Stager(int tid) : o(tid / kG), q((tid % kG) * W) {}

  // Full, aligned, inside: no checks. `g` points at this thread's first group.
  __device__ __forceinline__ void load_fast(const T* g, i64 ld) {
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      v[it] = __ldg(reinterpret_cast<const V*>(g + it * kLinesPerPass * ld));
    }
  }

  // Guarded: (r0, c0) is the tile's origin in X, (rows, cols) X's extent; zeros outside. The
  // bounds are checked in 32 bits against what is left of X past the origin (clamped to the
  // tile), which keeps the edge path's register count within the interior path's.
  __device__ __forceinline__ void load_guarded(const T* g, i64 ld, i64 r0, i64 c0, i64 rows,
                                               i64 cols, bool vec_ok) {
    const i64 left_r = rows - r0, left_c = cols - c0;
    const int left_o =
        static_cast<int>(min(kColsContig ? left_r : left_c, i64{kColsContig ? ROWS : COLS}));
    const int left_q =
        static_cast<int>(min(kColsContig ? left_c : left_r, i64{kColsContig ? COLS : ROWS}));
    const T* base = g + (kColsContig ? r0 * ld + c0 : c0 * ld + r0) + o * ld + q;
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      const int line = o + it * kLinesPerPass;
      const T* src = base + static_cast<i64>(it * kLinesPerPass) * ld;
      if (vec_ok && line < left_o && q + W <= left_q) {
        v[it] = *reinterpret_cast<const V*>(src);
      } else {
        T e[W];
#pragma unroll
        for (int w = 0; w < W; ++w) e[w] = (line < left_o && q + w < left_q) ? src[w] : T(0);
        if constexpr (W == 4) {
          v[it] = V{e[0], e[1], e[2], e[3]};
        } else {
          v[it] = V{e[0], e[1]};
        }
      }
    }
  }

  __device__ __forceinline__ void store(T* s, int s_row, int s_col) const {
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      const int line = o + it * kLinesPerPass;
      const int r = kColsContig ? line : q;
      const int c = kColsContig ? q : line;
      T* dst = s + r * s_row + c * s_col;
      if constexpr (kVecStore) {
        *reinterpret_cast<V*>(dst) = v[it];
      } else {
        const int step = kColsContig ? s_col : s_row;
        const T* e = reinterpret_cast<const T*>(&v[it]);
#pragma unroll
        for (int w = 0; w < W; ++w) dst[w * step] = e[w];
      }
    }
  }
};

// acc += the block's product over all of k. kInterior: the block's tile lies inside C and both
// operands allow 16-byte loads, so every full k-tile is copied without checks. The partial k-tile
// (if any) goes first, guarded, so that the remaining tiles start at aligned multiples of BK.
template <bool kInterior, typename T, bool TA, bool TB, typename C>
__device__ __forceinline__ void tuned_mainloop(
    const simt::Args<T>& g, T* smem, i64 i0, i64 j0, int tid, int row0, int col0, bool a_vec,
    bool b_vec, T (&acc)[TileLayout<T, C>::TM][TileLayout<T, C>::TN]) {
  using L = TileLayout<T, C>;
  using V = typename Vec<T>::type;
  constexpr int W = L::W, BK = C::BK;
  // A' tile: BM x BK, X(i, p); shared k-major (as[p * kLdA + i]: contiguous along rows).
  using SA = Stager<T, C::BM, BK, C::NT, !TA, false>;
  // B' tile: BK x BN, X(p, j); shared bs[p * kLdB + j]: contiguous along columns.
  using SB = Stager<T, BK, C::BN, C::NT, !TB, true>;
  SA sa(tid);
  SB sb(tid);
  // Fast-path pointers at this thread's first group of k-tile 0, bumped by one k-tile per copy.
  const T* pa = g.a + (TA ? (sa.o * g.lda + i0 + sa.q) : ((i0 + sa.o) * g.lda + sa.q));
  const T* pb = g.b + (TB ? ((j0 + sb.o) * g.ldb + sb.q) : (sb.o * g.ldb + j0 + sb.q));
  const int k_tiles = static_cast<int>(simt::ceil_div(g.k, BK));
  const bool tail = g.k % BK != 0;  // then sequence step 0 is k-tile k_tiles - 1

  auto load_guarded = [&](int t) {
    const i64 p0 = static_cast<i64>(tail ? (t == 0 ? k_tiles - 1 : t - 1) : t) * BK;
    sa.load_guarded(g.a, g.lda, i0, p0, g.m, g.k, a_vec);  // logical A'(i, p)
    sb.load_guarded(g.b, g.ldb, p0, j0, g.k, g.n, b_vec);  // logical B'(p, j)
  };
  auto load_fast = [&]() {
    sa.load_fast(pa, g.lda);
    sb.load_fast(pb, g.ldb);
    pa += TA ? BK * g.lda : BK;
    pb += TB ? BK : BK * g.ldb;
  };
  auto stage_a = [&](int s) { return smem + s * L::kStage; };
  auto stage_b = [&](int s) { return smem + s * L::kStage + BK * L::kLdA; };

  T fa[2][L::TM];
  T fb[2][L::TN];
  auto load_frags = [&](int buf, const T* as, const T* bs, int p) {
#pragma unroll
    for (int r = 0; r < C::RM; ++r) {
      *reinterpret_cast<V*>(&fa[buf][r * W]) =
          *reinterpret_cast<const V*>(&as[p * L::kLdA + row0 + r * W * C::LM]);
    }
#pragma unroll
    for (int r = 0; r < C::RN; ++r) {
      *reinterpret_cast<V*>(&fb[buf][r * W]) =
          *reinterpret_cast<const V*>(&bs[p * L::kLdB + col0 + r * W * C::LN]);
    }
  };

  if (kInterior && !tail) {
    load_fast();
  } else {
    load_guarded(0);
  }
  sa.store(stage_a(0), 1, L::kLdA);
  sb.store(stage_b(0), L::kLdB, 1);
  __syncthreads();
  load_frags(0, stage_a(0), stage_b(0), 0);

  int s = 0;
  for (int t = 0; t < k_tiles; ++t) {
    const bool more = t + 1 < k_tiles;
    if (more) {  // in flight during this tile's math
      if constexpr (kInterior) {
        load_fast();
      } else {
        load_guarded(t + 1);
      }
    }
#pragma unroll
    for (int p = 0; p < BK; ++p) {
      if (p == BK - 1) {
        // Stage s ^ 1 was last read before the previous barrier: refill it, publish, switch.
        if (more) {
          sa.store(stage_a(s ^ 1), 1, L::kLdA);
          sb.store(stage_b(s ^ 1), L::kLdB, 1);
        }
        __syncthreads();
        s ^= 1;
      }
      // Next step's fragments (step 0 of the next tile after the switch) before this step's math.
      if (p < BK - 1 || more) load_frags((p + 1) % 2, stage_a(s), stage_b(s), (p + 1) % BK);
#pragma unroll
      for (int x = 0; x < L::TM; ++x) {
#pragma unroll
        for (int yy = 0; yy < L::TN; ++yy) {
          // Zig-zag, (5) above: each FMA shares one operand with the one before it.
          const int y = x % 2 == 0 ? yy : L::TN - 1 - yy;
          acc[x][y] += fa[p % 2][x] * fb[p % 2][y];
        }
      }
    }
  }
}

template <typename T, bool TA, bool TB, typename C>
__global__ void __launch_bounds__(C::NT, C::MIN_BLOCKS)
    tuned_kernel(simt::Args<T> g, i64 m_tiles, i64 n_tiles, bool a_vec, bool b_vec, bool c_vec) {
  using L = TileLayout<T, C>;
  constexpr int W = L::W;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const smem = reinterpret_cast<T*>(smem_raw);

  i64 tm, tn;
  simt::grouped_tile_coords(m_tiles, n_tiles, tm, tn);
  const i64 i0 = tm * C::BM;
  const i64 j0 = tn * C::BN;
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  // This lane's first row / column inside the block tile; blocks follow at strides W * LM, W * LN.
  const int row0 = (warp / C::WARPS_N) * L::WTM + (lane % C::LM) * W;
  const int col0 = (warp % C::WARPS_N) * L::WTN + (lane / C::LM) * W;

  T acc[L::TM][L::TN] = {};
  if (a_vec && b_vec && i0 + C::BM <= g.m && j0 + C::BN <= g.n) {
    tuned_mainloop<true, T, TA, TB, C>(g, smem, i0, j0, tid, row0, col0, a_vec, b_vec, acc);
  } else {
    tuned_mainloop<false, T, TA, TB, C>(g, smem, i0, j0, tid, row0, col0, a_vec, b_vec, acc);
  }

#pragma unroll
  for (int rm = 0; rm < C::RM; ++rm) {
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const i64 i = i0 + row0 + rm * W * C::LM + w;
#pragma unroll
      for (int rn = 0; rn < C::RN; ++rn) {
        simt::store_c_row<W>(g, i, j0 + col0 + rn * W * C::LN, &acc[rm * W + w][rn * W], c_vec);
      }
    }
  }
}

// fp32: 128x128 tiles, 8 warps of 64x32, 8x8 results per lane (2x2 blocks of 4x4), two blocks per
// SM (<= 128 registers). A k-step of 16 doubles the staging registers and spills (ptxas: 180-240
// bytes), so it is not offered.
using F32Big = Tuned<128, 128, 8, 2, 4, 8, 2, 2, 2>;
// Small or thin C: 64x64 tiles, 4 warps of 32x32, 8x4 results per lane, more blocks per SM.
using F32Small = Tuned<64, 64, 8, 2, 2, 4, 2, 1, 4>;
// fp64: 128x128 tiles, 8 warps of 64x32, 8x8 doubles per lane (4x4 blocks of 2x2), one block per
// SM; 64x64 tiles with 4x4 per lane for small C.
using F64Big = Tuned<128, 128, 8, 2, 4, 8, 4, 4, 1>;
using F64Small = Tuned<64, 64, 8, 2, 2, 4, 4, 2, 2>;

template <typename C, typename T, bool TA, bool TB>
cudaError_t run(const GemmProblem& p, cudaStream_t stream) {
  using L = TileLayout<T, C>;
  auto* kernel = &tuned_kernel<T, TA, TB, C>;
  static const cudaError_t attr = simt::allow_smem(kernel, L::kBytes);  // once per instantiation
  if (attr != cudaSuccess) return attr;
  const auto g = simt::make_args<T>(p);
  const i64 m_tiles = simt::ceil_div(p.m, C::BM);
  const i64 n_tiles = simt::ceil_div(p.n, C::BN);
  kernel<<<dim3(static_cast<unsigned>(m_tiles * n_tiles)), dim3(C::NT), L::kBytes, stream>>>(
      g, m_tiles, n_tiles, simt::vector_ok(g.a, g.lda), simt::vector_ok(g.b, g.ldb),
      simt::vector_ok(g.c, g.ldc));
  return cudaGetLastError();
}

// 128x128 tiles once they give the 132 SMs about three quarters of a wave or more (the pinned
// measurements in docs/benchmarks/gemm-simt.md put the switch near 96 tiles).
bool big_tiles(const GemmProblem& p) {
  return simt::ceil_div(p.m, 128) * simt::ceil_div(p.n, 128) >= 96;
}

}  // namespace

cudaError_t launch_gemm_simt_tuned(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    constexpr bool kTA = decltype(ta)::value, kTB = decltype(tb)::value;
    if constexpr (std::is_same_v<T, double>) {
      return big_tiles(p) ? run<F64Big, T, kTA, kTB>(p, stream)
                          : run<F64Small, T, kTA, kTB>(p, stream);
    } else {
      return big_tiles(p) ? run<F32Big, T, kTA, kTB>(p, stream)
                          : run<F32Small, T, kTA, kTB>(p, stream);
    }
  });
}

cudaError_t launch_gemm_simt_tuned_128x128(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    constexpr bool kTA = decltype(ta)::value, kTB = decltype(tb)::value;
    if constexpr (std::is_same_v<T, double>) {
      return run<F64Big, T, kTA, kTB>(p, stream);
    } else {
      return run<F32Big, T, kTA, kTB>(p, stream);
    }
  });
}

cudaError_t launch_gemm_simt_tuned_64x64(const GemmProblem& p, cudaStream_t stream) {
  return simt::dispatch(p, [&](auto t, auto ta, auto tb) {
    using T = decltype(t);
    constexpr bool kTA = decltype(ta)::value, kTB = decltype(tb)::value;
    if constexpr (std::is_same_v<T, double>) {
      return run<F64Small, T, kTA, kTB>(p, stream);
    } else {
      return run<F32Small, T, kTA, kTB>(p, stream);
    }
  });
}

}  // namespace matserve::kernels
