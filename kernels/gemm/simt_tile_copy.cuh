// Global -> shared tile copies for the SIMT ladder. A tile is ROWS x COLS of a logical matrix
// X(r, c) stored with one contiguous index (kColsContig: X(r, c) = g[r * ld + c], else g[c * ld +
// r]); consecutive threads walk the contiguous index (coalesced), and the shared layout is free
// (s[r * s_row + c * s_col]), which is how op(A)/op(B) are absorbed. Outside (rows, cols): zeros.
#pragma once

#include "kernels/gemm/simt_common.cuh"

namespace matserve::kernels::simt {

// Scalar copy: NT threads, one element per step.
template <int ROWS, int COLS, int NT, bool kColsContig, typename T>
__device__ __forceinline__ void copy_tile(T* s, int s_row, int s_col, const T* g, i64 ld, i64 r0,
                                          i64 c0, i64 rows, i64 cols, int tid) {
  constexpr int kCount = ROWS * COLS;
#pragma unroll
  for (int it = 0; it < (kCount + NT - 1) / NT; ++it) {
    const int e = it * NT + tid;
    if (kCount % NT != 0 && e >= kCount) break;
    const int r = kColsContig ? e / COLS : e % ROWS;
    const int c = kColsContig ? e % COLS : e / ROWS;
    const i64 gr = r0 + r;
    const i64 gc = c0 + c;
    T v = T(0);
    if (gr < rows && gc < cols) v = kColsContig ? g[gr * ld + gc] : g[gc * ld + gr];
    s[r * s_row + c * s_col] = v;
  }
}

// 16-byte vector of T (float4 or double2).
template <typename T>
struct Vec;
template <>
struct Vec<float> {
  using type = float4;
  static constexpr int kWidth = 4;
};
template <>
struct Vec<double> {
  using type = double2;
  static constexpr int kWidth = 2;
};

// Whether 16-byte loads along the contiguous index are legal: base 16-byte aligned and ld a
// multiple of the vector width (then every vector that starts at a multiple of it is aligned).
template <typename T>
__host__ __device__ inline bool vector_ok(const T* base, i64 ld) {
  return (reinterpret_cast<std::uintptr_t>(base) % 16 == 0) && (ld % Vec<T>::kWidth == 0);
}

// Vectorized copy: each step moves one 16-byte group along the contiguous index, when the group
// is aligned (vec_ok) and fully inside the matrix; otherwise the group's elements one by one. When
// kStoreVec, the shared tile is contiguous along the same index (s_contig == 1) and the group is
// stored as one 16-byte store; otherwise element by element (the transposing store).
template <int ROWS, int COLS, int NT, bool kColsContig, bool kStoreVec, typename T>
__device__ __forceinline__ void copy_tile_vec(T* s, int s_row, int s_col, const T* g, i64 ld,
                                              i64 r0, i64 c0, i64 rows, i64 cols, bool vec_ok,
                                              int tid) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::kWidth;
  constexpr int kContig = kColsContig ? COLS : ROWS;  // length along the contiguous index
  constexpr int kOther = kColsContig ? ROWS : COLS;
  static_assert(kContig % W == 0, "tile edge must hold whole vectors");
  constexpr int kGroups = kContig / W * kOther;
#pragma unroll
  for (int it = 0; it < (kGroups + NT - 1) / NT; ++it) {
    const int e = it * NT + tid;
    if (kGroups % NT != 0 && e >= kGroups) break;
    const int q = (e % (kContig / W)) * W;  // offset along the contiguous index
    const int o = e / (kContig / W);        // index along the other one
    const int r = kColsContig ? o : q;
    const int c = kColsContig ? q : o;
    const i64 g_o = (kColsContig ? r0 : c0) + o;
    const i64 g_q = (kColsContig ? c0 : r0) + q;
    const i64 lim_o = kColsContig ? rows : cols;
    const i64 lim_q = kColsContig ? cols : rows;
    T v[W];
    if (vec_ok && g_o < lim_o && g_q + W <= lim_q) {
      const V x = *reinterpret_cast<const V*>(g + g_o * ld + g_q);
      if constexpr (W == 4) {
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
      } else {
        v[0] = x.x, v[1] = x.y;
      }
    } else {
#pragma unroll
      for (int w = 0; w < W; ++w) {
        v[w] = (g_o < lim_o && g_q + w < lim_q) ? g[g_o * ld + g_q + w] : T(0);
      }
    }
    T* dst = s + r * s_row + c * s_col;
    if constexpr (kStoreVec) {
      V x;
      if constexpr (W == 4) {
        x = V{v[0], v[1], v[2], v[3]};
      } else {
        x = V{v[0], v[1]};
      }
      *reinterpret_cast<V*>(dst) = x;
    } else {
      const int step = kColsContig ? s_col : s_row;
#pragma unroll
      for (int w = 0; w < W; ++w) dst[w * step] = v[w];
    }
  }
}

}  // namespace matserve::kernels::simt

namespace matserve::kernels::simt {

// Epilogue for COUNT consecutive results of row i starting at column j: 16-byte loads/stores of C
// where aligned (vec_ok: C's base and ldc allow it) and inside the matrix, element by element at
// the right edge or when misaligned. C is read only when beta != 0.
template <int COUNT, typename T>
__device__ __forceinline__ void store_c_row(const Args<T>& g, i64 i, i64 j, const T* acc,
                                            bool vec_ok) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::kWidth;
  if (i >= g.m) return;
  T* row = g.c + i * g.ldc;
  if constexpr (COUNT % W == 0) {
#pragma unroll
    for (int q = 0; q < COUNT; q += W) {
      const i64 jj = j + q;
      if (vec_ok && jj + W <= g.n) {
        T v[W];
#pragma unroll
        for (int w = 0; w < W; ++w) v[w] = g.alpha * acc[q + w];
        if (g.beta != T(0)) {
          const V old = *reinterpret_cast<const V*>(row + jj);
          if constexpr (W == 4) {
            v[0] += g.beta * old.x, v[1] += g.beta * old.y;
            v[2] += g.beta * old.z, v[3] += g.beta * old.w;
          } else {
            v[0] += g.beta * old.x, v[1] += g.beta * old.y;
          }
        }
        V out;
        if constexpr (W == 4) {
          out = V{v[0], v[1], v[2], v[3]};
        } else {
          out = V{v[0], v[1]};
        }
        *reinterpret_cast<V*>(row + jj) = out;
      } else {
#pragma unroll
        for (int w = 0; w < W; ++w) {
          if (jj + w < g.n) store_c(g.c, g.ldc, i, jj + w, acc[q + w], g.alpha, g.beta);
        }
      }
    }
  } else {
#pragma unroll
    for (int q = 0; q < COUNT; ++q) {
      if (j + q < g.n) store_c(g.c, g.ldc, i, j + q, acc[q], g.alpha, g.beta);
    }
  }
}

}  // namespace matserve::kernels::simt

namespace matserve::kernels::simt {

// copy_tile_vec split in two steps: load() brings this thread's 16-byte groups of a tile into
// registers (issued early, so the loads fly while the thread computes), store() writes them to
// shared memory element by element (the transposing store) once the target buffer is free.
template <int ROWS, int COLS, int NT, bool kColsContig, typename T>
struct TileRegs {
  static constexpr int W = Vec<T>::kWidth;
  static constexpr int kContig = kColsContig ? COLS : ROWS;
  static constexpr int kOther = kColsContig ? ROWS : COLS;
  static constexpr int kGroups = kContig / W * kOther;
  static_assert(kContig % W == 0 && kGroups % NT == 0, "tile must split evenly into groups");
  static constexpr int kPer = kGroups / NT;
  T v[kPer][W];

  __device__ __forceinline__ void load(const T* g, i64 ld, i64 r0, i64 c0, i64 rows, i64 cols,
                                       bool vec_ok, int tid) {
    using V = typename Vec<T>::type;
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      const int e = it * NT + tid;
      const int q = (e % (kContig / W)) * W;
      const int o = e / (kContig / W);
      const i64 g_o = (kColsContig ? r0 : c0) + o;
      const i64 g_q = (kColsContig ? c0 : r0) + q;
      const i64 lim_o = kColsContig ? rows : cols;
      const i64 lim_q = kColsContig ? cols : rows;
      if (vec_ok && g_o < lim_o && g_q + W <= lim_q) {
        const V x = *reinterpret_cast<const V*>(g + g_o * ld + g_q);
        if constexpr (W == 4) {
          v[it][0] = x.x, v[it][1] = x.y, v[it][2] = x.z, v[it][3] = x.w;
        } else {
          v[it][0] = x.x, v[it][1] = x.y;
        }
      } else {
#pragma unroll
        for (int w = 0; w < W; ++w) {
          v[it][w] = (g_o < lim_o && g_q + w < lim_q) ? g[g_o * ld + g_q + w] : T(0);
        }
      }
    }
  }

  __device__ __forceinline__ void store(T* s, int s_row, int s_col, int tid) const {
#pragma unroll
    for (int it = 0; it < kPer; ++it) {
      const int e = it * NT + tid;
      const int q = (e % (kContig / W)) * W;
      const int o = e / (kContig / W);
      const int r = kColsContig ? o : q;
      const int c = kColsContig ? q : o;
      const int step = kColsContig ? s_col : s_row;
#pragma unroll
      for (int w = 0; w < W; ++w) s[r * s_row + c * s_col + w * step] = v[it][w];
    }
  }
};

}  // namespace matserve::kernels::simt
