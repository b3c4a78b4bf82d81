// cp.async (sm_80+) global -> shared copies for the pipelined SIMT kernel: 16-byte copies where a
// whole aligned vector lies inside the matrix, element copies (4 or 8 bytes) otherwise, with the
// hardware's zero fill (src-size 0) outside it. Element copies may land anywhere in shared memory,
// which is how a k-contiguous A' reaches a k-major tile without passing through registers.
#pragma once

#include "kernels/cuda/async_copy.cuh"
#include "kernels/gemm/simt_common.cuh"
#include "kernels/gemm/simt_tile_copy.cuh"

namespace matserve::kernels::simt {

// copy_tile_vec's layout rules (see simt_tile_copy.cuh), issued as asynchronous copies.
template <int ROWS, int COLS, int NT, bool kColsContig, bool kStoreVec, typename T>
__device__ __forceinline__ void cp_async_tile(T* s, int s_row, int s_col, const T* g, i64 ld,
                                              i64 r0, i64 c0, i64 rows, i64 cols, bool vec_ok,
                                              int tid) {
  constexpr int W = Vec<T>::kWidth;
  constexpr int kContig = kColsContig ? COLS : ROWS;
  constexpr int kOther = kColsContig ? ROWS : COLS;
  static_assert(kContig % W == 0, "tile edge must hold whole vectors");
  constexpr int kGroups = kContig / W * kOther;
#pragma unroll
  for (int it = 0; it < (kGroups + NT - 1) / NT; ++it) {
    const int e = it * NT + tid;
    if (kGroups % NT != 0 && e >= kGroups) break;
    const int q = (e % (kContig / W)) * W;
    const int o = e / (kContig / W);
    const int r = kColsContig ? o : q;
    const int c = kColsContig ? q : o;
    const i64 g_o = (kColsContig ? r0 : c0) + o;
    const i64 g_q = (kColsContig ? c0 : r0) + q;
    const i64 lim_o = kColsContig ? rows : cols;
    const i64 lim_q = kColsContig ? cols : rows;
    T* dst = s + r * s_row + c * s_col;
    const T* src = g + g_o * ld + g_q;
    const int step = kColsContig ? s_col : s_row;
    if (kStoreVec && vec_ok && g_o < lim_o && g_q + W <= lim_q) {
      async_copy::copy16(dst, src);
    } else {
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const bool inside = g_o < lim_o && g_q + w < lim_q;
        async_copy::copy_elem<sizeof(T)>(dst + w * step, inside ? src + w : g,
                                         inside ? static_cast<int>(sizeof(T)) : 0);
      }
    }
  }
}

}  // namespace matserve::kernels::simt
