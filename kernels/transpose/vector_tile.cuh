// The 16-byte tile machinery of the tuned transpose kernels (vectorized.cu, inplace_square.cu).
// A tile is T x T elements, T = 16 V with V = 16 / sizeof(element) (fp64 32, fp32 64, 16-bit 128).
// 256 threads each load a V x V micro-block with V 16-byte loads, transpose it in registers and
// store it as V 16-byte rows of a shared-memory tile that already holds the transpose; the write
// phase then reads 16-byte chunks along tile rows and stores them, so both global directions move
// whole 256-byte segments. Chunks are XOR-swizzled (chunk ^ (row / V) % 8) so that neither the
// scattered stores nor the row reads of a quarter-warp meet in a bank. The global loads and
// stores can carry a cache hint (LoadHint / StoreHint below), chosen per kernel by measurement.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/transpose/transpose_common.cuh"

namespace matserve::kernels::transpose_detail {

// Cache hints of the 16-byte global accesses: plain; ld.global.nc (read-only path); ld.global.cs
// (streaming, evict first) / st.global.cs (streaming); st.global.cg (L2 only).
enum LoadHint : int { kLoadPlain = 0, kLoadNc = 1, kLoadCs = 2 };
enum StoreHint : int { kStorePlain = 0, kStoreCs = 1, kStoreCg = 2 };

template <int H>
__device__ __forceinline__ uint4 load16(const void* p) {
  const auto* q = static_cast<const uint4*>(p);
  if constexpr (H == kLoadNc) return __ldg(q);
  if constexpr (H == kLoadCs) return __ldcs(q);
  return *q;
}

template <int H>
__device__ __forceinline__ void store16(void* p, uint4 v) {
  auto* q = static_cast<uint4*>(p);
  if constexpr (H == kStoreCs) {
    __stcs(q, v);
  } else if constexpr (H == kStoreCg) {
    __stcg(q, v);
  } else {
    *q = v;
  }
}

template <typename Bits, int LoadH = kLoadPlain, int StoreH = kStorePlain>
struct VecTile {
  static constexpr int V = 16 / static_cast<int>(sizeof(Bits));
  static constexpr int T = 16 * V;
  static constexpr int kThreads = 256;
  static constexpr int kChunks = 16;  // 16-byte chunks per tile row
  static constexpr std::size_t kSmemBytes = static_cast<std::size_t>(T) * kChunks * 16;

  __device__ __forceinline__ static int swizzle(int row, int chunk) {
    return chunk ^ ((row / V) & 7);
  }

  // Loads input tile (r0, c0) of a rows x cols matrix, applies op and leaves its transpose in s
  // (s row = input column within the tile). `fast`: the tile is whole and 16-byte aligned.
  template <typename Op>
  __device__ __forceinline__ static void load_transposed(const Op& op, const Bits* in,
                                                         std::int64_t ld_in, std::int64_t rows,
                                                         std::int64_t cols, std::int64_t r0,
                                                         std::int64_t c0, bool fast, uint4* s) {
    const int t = threadIdx.x;
    const int mc = t % kChunks;  // micro-block column (V input columns)
    const int mr = t / kChunks;  // micro-block row (V input rows)
    Bits v[V][V];
    if (fast) {
      const Bits* base = in + (r0 + V * mr) * ld_in + c0 + V * mc;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const uint4 x = load16<LoadH>(base + k * ld_in);
        std::memcpy(v[k], &x, 16);
      }
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const std::int64_t i = r0 + V * mr + k;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const std::int64_t j = c0 + V * mc + e;
          v[k][e] = (i < rows && j < cols) ? in[i * ld_in + j] : Bits{0};
        }
      }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) {
      Bits w[V];
#pragma unroll
      for (int k = 0; k < V; ++k) w[k] = op(v[k][e]);
      uint4 y;
      std::memcpy(&y, w, 16);
      const int row = V * mc + e;
      s[row * kChunks + swizzle(row, mr)] = y;
    }
  }

  // Writes the transposed tile held in s to out rows orow0.., columns ocol0.. of an
  // out_rows x out_cols matrix.
  __device__ __forceinline__ static void store(const uint4* s, Bits* out, std::int64_t ld_out,
                                               std::int64_t out_rows, std::int64_t out_cols,
                                               std::int64_t orow0, std::int64_t ocol0, bool fast) {
    const int q = threadIdx.x % kChunks;
#pragma unroll
    for (int it = 0; it < V; ++it) {
      const int row = threadIdx.x / kChunks + 16 * it;
      const uint4 y = s[row * kChunks + swizzle(row, q)];
      if (fast) {
        store16<StoreH>(out + (orow0 + row) * ld_out + ocol0 + V * q, y);
      } else {
        Bits w[V];
        std::memcpy(w, &y, 16);
        const std::int64_t oi = orow0 + row;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const std::int64_t oj = ocol0 + V * q + k;
          if (oi < out_rows && oj < out_cols) out[oi * ld_out + oj] = w[k];
        }
      }
    }
  }
};

// True when every row start of both matrices is 16-byte aligned.
inline bool rows_16b_aligned(const void* in, std::int64_t ld_in, const void* out,
                             std::int64_t ld_out, std::size_t elem) {
  const auto a = reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out);
  return a % 16 == 0 && (static_cast<std::size_t>(ld_in) * elem) % 16 == 0 &&
         (static_cast<std::size_t>(ld_out) * elem) % 16 == 0;
}

}  // namespace matserve::kernels::transpose_detail
