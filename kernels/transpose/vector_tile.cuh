// The 16-byte tile machinery of the tuned transpose kernels (vectorized.cu, inplace_square.cu).
// A tile is T x T elements, T = 16 V with V = 16 / sizeof(element) (fp64 32, fp32 64, 16-bit 128).
// 256 threads each load a V x V micro-block with V 16-byte loads, transpose it in registers and
// store it as V 16-byte rows of a shared-memory tile that already holds the transpose; the write
// phase then reads 16-byte chunks along tile rows and stores them, so both global directions move
// whole 256-byte segments. Chunks are XOR-swizzled (chunk ^ (row / V) % 8) so that neither the
// scattered stores nor the row reads of a quarter-warp meet in a bank. The global loads and
// stores can carry a cache hint (LoadHint / StoreHint below), chosen per kernel by measurement.
// Partial edge tiles keep the 16-byte accesses, predicated per chunk; rows that are not 16-byte
// aligned (4095 x 4097) take coalesced element accesses through a padded tile (TileMode below),
// where the earlier per-element path touched every sector V times.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

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

// Scalar accesses of the unaligned path, with the same cache hints (2-, 4- and 8-byte elements).
template <typename Bits>
struct ScalarAccess {
  using U =
      std::conditional_t<sizeof(Bits) == 2, unsigned short,
                         std::conditional_t<sizeof(Bits) == 4, unsigned int, unsigned long long>>;
  template <int H>
  __device__ __forceinline__ static Bits load(const Bits* p) {
    const auto* q = reinterpret_cast<const U*>(p);
    U u;
    if constexpr (H == kLoadNc) {
      u = __ldg(q);
    } else if constexpr (H == kLoadCs) {
      u = __ldcs(q);
    } else {
      u = *q;
    }
    return static_cast<Bits>(u);
  }
  template <int H>
  __device__ __forceinline__ static void store(Bits* p, Bits v) {
    auto* q = reinterpret_cast<U*>(p);
    const U u = static_cast<U>(v);
    if constexpr (H == kStoreCs) {
      __stcs(q, u);
    } else if constexpr (H == kStoreCg) {
      __stcg(q, u);
    } else {
      *q = u;
    }
  }
};

// How a tile moves (the same mode must be used by load_transposed and store of one tile, as the
// shared-memory layout differs):
//  kWhole   whole tile, 16-byte aligned rows: unpredicated 16-byte accesses;
//  kChunked partial tile, 16-byte aligned rows: 16-byte accesses predicated per chunk (edge
//           chunks that straddle the border, possible only with a padded leading dimension, go
//           element by element);
//  kScalar  rows not 16-byte aligned: coalesced element accesses (a warp moves 32 consecutive
//           elements of one row, V x V of them in flight per thread) through a padded
//           (conflict-free) shared tile instead of the swizzled 16-byte one.
enum TileMode : int { kWhole = 0, kChunked = 1, kScalar = 2 };

__host__ __device__ inline int tile_mode(bool aligned, bool whole) {
  return aligned ? (whole ? kWhole : kChunked) : kScalar;
}

template <typename Bits, int LoadH = kLoadPlain, int StoreH = kStorePlain>
struct VecTile {
  static constexpr int V = 16 / static_cast<int>(sizeof(Bits));
  static constexpr int T = 16 * V;
  static constexpr int kThreads = 256;
  static constexpr int kChunks = 16;  // 16-byte chunks per tile row
  // Scalar path: T x P elements, P = T + pad so that a warp's 32 rows fall in distinct banks.
  static constexpr int kPad = sizeof(Bits) >= 4 ? 1 : 2;
  static constexpr int P = T + kPad;
  static constexpr std::size_t kSwizzledBytes = static_cast<std::size_t>(T) * kChunks * 16;
  static constexpr std::size_t kPaddedBytes = static_cast<std::size_t>(T) * P * sizeof(Bits);
  // Shared memory per tile, in bytes and in uint4 (the stride of a second tile).
  static constexpr std::size_t kSmemBytes =
      ((kSwizzledBytes > kPaddedBytes ? kSwizzledBytes : kPaddedBytes) + 15) / 16 * 16;
  static constexpr std::size_t kSmemVecs = kSmemBytes / 16;
  static constexpr int kScalarIters = T * T / kThreads;  // = V * V
  // Element loads in flight per thread on the scalar path (at most 16 per batch, to stay
  // clear of register spills).
  static constexpr int kScalarBatch = kScalarIters > 16 ? 16 : kScalarIters;

  __device__ __forceinline__ static int swizzle(int row, int chunk) {
    return chunk ^ ((row / V) & 7);
  }

  // Loads input tile (r0, c0) of a rows x cols matrix, applies op and leaves its transpose in s
  // (s row = input column within the tile). mode: TileMode (tile_mode above).
  template <typename Op>
  __device__ __forceinline__ static void load_transposed(const Op& op, const Bits* in,
                                                         std::int64_t ld_in, std::int64_t rows,
                                                         std::int64_t cols, std::int64_t r0,
                                                         std::int64_t c0, int mode, uint4* s) {
    const int t = threadIdx.x;
    if (mode == kScalar) {
      Bits* se = reinterpret_cast<Bits*>(s);
#pragma unroll
      for (int b0 = 0; b0 < kScalarIters; b0 += kScalarBatch) {  // kScalarBatch loads in flight
        Bits v[kScalarBatch];
#pragma unroll
        for (int it = 0; it < kScalarBatch; ++it) {
          const int idx = t + kThreads * (b0 + it);
          const std::int64_t i = r0 + idx / T, j = c0 + idx % T;
          v[it] = (i < rows && j < cols)
                      ? ScalarAccess<Bits>::template load<LoadH>(in + i * ld_in + j)
                      : Bits{0};
        }
#pragma unroll
        for (int it = 0; it < kScalarBatch; ++it) {
          const int idx = t + kThreads * (b0 + it);
          se[(idx % T) * P + idx / T] = op(v[it]);
        }
      }
      return;
    }
    const int mc = t % kChunks;  // micro-block column (V input columns)
    const int mr = t / kChunks;  // micro-block row (V input rows)
    Bits v[V][V];
    if (mode == kWhole) {
      const Bits* base = in + (r0 + V * mr) * ld_in + c0 + V * mc;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const uint4 x = load16<LoadH>(base + k * ld_in);
        std::memcpy(v[k], &x, 16);
      }
    } else {
      const std::int64_t j = c0 + V * mc;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const std::int64_t i = r0 + V * mr + k;
        uint4 x = make_uint4(0, 0, 0, 0);
        if (i < rows && j + V <= cols) {
          x = load16<LoadH>(in + i * ld_in + j);
        } else if (i < rows && j < cols) {
          Bits w[V];
#pragma unroll
          for (int e = 0; e < V; ++e) w[e] = j + e < cols ? in[i * ld_in + j + e] : Bits{0};
          std::memcpy(&x, w, 16);
        }
        std::memcpy(v[k], &x, 16);
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
  // out_rows x out_cols matrix; mode as given to load_transposed.
  __device__ __forceinline__ static void store(const uint4* s, Bits* out, std::int64_t ld_out,
                                               std::int64_t out_rows, std::int64_t out_cols,
                                               std::int64_t orow0, std::int64_t ocol0, int mode) {
    if (mode == kScalar) {
      const Bits* se = reinterpret_cast<const Bits*>(s);
#pragma unroll
      for (int it = 0; it < kScalarIters; ++it) {
        const int idx = static_cast<int>(threadIdx.x) + kThreads * it;
        const int a = idx / T, b = idx % T;
        const std::int64_t oi = orow0 + a, oj = ocol0 + b;
        if (oi < out_rows && oj < out_cols) {
          ScalarAccess<Bits>::template store<StoreH>(out + oi * ld_out + oj, se[a * P + b]);
        }
      }
      return;
    }
    const int q = threadIdx.x % kChunks;
#pragma unroll
    for (int it = 0; it < V; ++it) {
      const int row = threadIdx.x / kChunks + 16 * it;
      const uint4 y = s[row * kChunks + swizzle(row, q)];
      const std::int64_t oi = orow0 + row, oj = ocol0 + V * q;
      if (mode == kWhole) {
        store16<StoreH>(out + oi * ld_out + oj, y);
      } else if (oi < out_rows && oj + V <= out_cols) {
        store16<StoreH>(out + oi * ld_out + oj, y);
      } else if (oi < out_rows) {
        Bits w[V];
        std::memcpy(w, &y, 16);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if (oj + k < out_cols) out[oi * ld_out + oj + k] = w[k];
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
