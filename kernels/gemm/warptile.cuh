// Warp tiling, shared by the warptile rung and the cp.async-pipelined top rung. A block's BM x BN
// tile of C is split among warps (WM x WN each); a warp walks its tile in WMITER x WNITER sub-tiles
// and each lane computes TM x TN results per sub-tile from k-major shared tiles (16-byte reads).
// Lanes of a warp read neighbouring shared addresses, and each warp's operands stay in registers.
#pragma once

#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_tile_copy.cuh"

namespace matserve::kernels::simt {

template <int BM_, int BN_, int BK_, int WM_, int WN_, int WNITER_, int TM_, int TN_, int NT_,
          int STAGES_>
struct WarpTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_;
  static constexpr int WNITER = WNITER_, TM = TM_, TN = TN_, NT = NT_, STAGES = STAGES_;
  static constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);
  static constexpr int WSUBM = WM / WMITER;
  static constexpr int WSUBN = WN / WNITER;
  static constexpr int LANES_N = WSUBN / TN;  // lanes along n in a sub-tile
  static_assert(WMITER >= 1 && (WM * WN) % (32 * TM * TN * WNITER) == 0, "bad warp split");
  static_assert(LANES_N * (WSUBM / TM) == 32, "a sub-tile must cover one warp");
  static_assert((BM / WM) * (BN / WN) * 32 == NT, "warps must cover the block tile");
};

// Shared tiles are k-major with a 16-byte pad per row (cheaper transposing stores).
template <typename T, typename C>
struct WarpTileSmem {
  static constexpr int kPad = Vec<T>::kWidth;
  static constexpr int kLdA = C::BM + kPad;  // as[p * kLdA + r]
  static constexpr int kLdB = C::BN + kPad;  // bs[p * kLdB + c]
  static constexpr int kStage = C::BK * (kLdA + kLdB);
  static constexpr int kBytes = kStage * C::STAGES * static_cast<int>(sizeof(T));
};

// Where this lane's results live inside the block tile.
template <typename C>
struct LanePos {
  int warp_m, warp_n, lane_m, lane_n;
  __device__ explicit LanePos(int tid) {
    const int warp = tid / 32;
    const int lane = tid % 32;
    warp_m = warp / (C::BN / C::WN);
    warp_n = warp % (C::BN / C::WN);
    lane_m = lane / C::LANES_N;
    lane_n = lane % C::LANES_N;
  }
  __device__ int row(int wm, int t) const {
    return warp_m * C::WM + wm * C::WSUBM + lane_m * C::TM + t;
  }
  __device__ int col(int wn, int t) const {
    return warp_n * C::WN + wn * C::WSUBN + lane_n * C::TN + t;
  }
};

// acc += the BK-deep product of one shared stage.
template <typename C, typename T>
__device__ __forceinline__ void warp_tile_mma(const T* as, const T* bs, const LanePos<C>& pos,
                                              T (&acc)[C::WMITER * C::TM][C::WNITER * C::TN]) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::kWidth;
  constexpr int kLdA = WarpTileSmem<T, C>::kLdA;
  constexpr int kLdB = WarpTileSmem<T, C>::kLdB;
  T reg_m[C::WMITER * C::TM];
  T reg_n[C::WNITER * C::TN];
#pragma unroll
  for (int p = 0; p < C::BK; ++p) {
#pragma unroll
    for (int wm = 0; wm < C::WMITER; ++wm) {
#pragma unroll
      for (int t = 0; t < C::TM; t += W) {
        *reinterpret_cast<V*>(&reg_m[wm * C::TM + t]) =
            *reinterpret_cast<const V*>(&as[p * kLdA + pos.row(wm, t)]);
      }
    }
#pragma unroll
    for (int wn = 0; wn < C::WNITER; ++wn) {
#pragma unroll
      for (int t = 0; t < C::TN; t += W) {
        *reinterpret_cast<V*>(&reg_n[wn * C::TN + t]) =
            *reinterpret_cast<const V*>(&bs[p * kLdB + pos.col(wn, t)]);
      }
    }
#pragma unroll
    for (int x = 0; x < C::WMITER * C::TM; ++x) {
#pragma unroll
      for (int y = 0; y < C::WNITER * C::TN; ++y) acc[x][y] += reg_m[x] * reg_n[y];
    }
  }
}

template <typename C, typename T>
__device__ __forceinline__ void warp_tile_store(
    const Args<T>& g, i64 i0, i64 j0, const LanePos<C>& pos,
    const T (&acc)[C::WMITER * C::TM][C::WNITER * C::TN], bool c_vec) {
#pragma unroll
  for (int wm = 0; wm < C::WMITER; ++wm) {
#pragma unroll
    for (int t = 0; t < C::TM; ++t) {
#pragma unroll
      for (int wn = 0; wn < C::WNITER; ++wn) {
        store_c_row<C::TN>(g, i0 + pos.row(wm, t), j0 + pos.col(wn, 0),
                           &acc[wm * C::TM + t][wn * C::TN], c_vec);
      }
    }
  }
}

// Block-tile order with L2 reuse: groups of `kGroup` block rows are walked column by column, so
// consecutive blocks share B' columns and a few A' rows.
__device__ __forceinline__ void grouped_tile_coords(i64 m_tiles, i64 n_tiles, i64& tm, i64& tn) {
  constexpr i64 kGroup = 8;
  const i64 id = blockIdx.x;
  const i64 per_group = kGroup * n_tiles;
  const i64 first_m = (id / per_group) * kGroup;
  const i64 rows = min(m_tiles - first_m, kGroup);
  tm = first_m + (id % per_group) % rows;
  tn = (id % per_group) / rows;
}

}  // namespace matserve::kernels::simt
