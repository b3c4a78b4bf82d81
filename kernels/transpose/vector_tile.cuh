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
// where the earlier per-element path touched every sector V times. The mode is a template
// parameter and the unaligned one a separate kernel instantiation, so the 16-byte kernels keep
// their registers low (fp32 45, 16-bit 79, no spills; one body with all three modes needed 128
// and 255 with spills: two and one blocks per SM, 88.5% and 75% of copy on the H100 at 8192^2,
// 96.2% and 96.0% now; docs/benchmarks/transpose.md, 2026-11-22).
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

// How a tile moves. Each mode is a separate template instantiation of load_transposed / store,
// so a kernel holds only the paths it can take (the 16-bit kernels with all three in one body
// needed 255 registers and spilled; the fp32 ones 128-174, two or one blocks per SM):
//  kWhole   whole tile, 16-byte aligned rows: unpredicated 16-byte accesses;
//  kChunked partial tile, 16-byte aligned rows: 16-byte accesses predicated per chunk; needs
//           rows and cols (of source and destination) to be multiples of V, so that no chunk
//           straddles the border (vec16_ok below; other shapes take kScalar);
//  kScalar  everything else (rows not 16-byte aligned, as 4095 x 4097): coalesced element
//           accesses (a warp moves 32 consecutive elements of one row, kScalarBatch of them in
//           flight per thread) through a padded (conflict-free) shared tile instead of the
//           swizzled 16-byte one.
// The same mode must be used by load_transposed and store of one tile (the shared layouts
// differ). Kernels take Aligned as a template parameter (chosen on the host): aligned kernels
// hold kWhole and kChunked and pick per tile (load_tile / store_tile), unaligned ones kScalar.
enum TileMode : int { kWhole = 0, kChunked = 1, kScalar = 2 };

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
  // Scalar path: thread t moves column t % T of the tile, rows t / T + kRowStep * it.
  static constexpr int kScalarIters = T * T / kThreads;  // = V * V
  static constexpr int kRowStep = kThreads / T;          // 8 (fp64), 4 (fp32), 2 (16-bit)
  // Element loads in flight per thread on the scalar path; the batches run in a rolled loop.
  static constexpr int kScalarBatch = kScalarIters > 16 ? 16 : kScalarIters;

  __device__ __forceinline__ static int swizzle(int row, int chunk) {
    return chunk ^ ((row / V) & 7);
  }

  // op on each of the V elements of a 16-byte chunk.
  template <typename Op>
  __device__ __forceinline__ static uint4 apply(const Op& op, uint4 y) {
    if constexpr (std::is_same_v<Op, CopyOp<Bits>>) {
      return y;
    } else {
      Bits w[V];
      std::memcpy(w, &y, 16);
#pragma unroll
      for (int k = 0; k < V; ++k) w[k] = op(w[k]);
      std::memcpy(&y, w, 16);
      return y;
    }
  }

  // Loads input tile (r0, c0) of a rows x cols matrix and leaves its transpose in s (s row =
  // input column within the tile), moving it as Mode says.
  template <int Mode>
  __device__ __forceinline__ static void load_transposed(const Bits* in, std::int64_t ld_in,
                                                         std::int64_t rows, std::int64_t cols,
                                                         std::int64_t r0, std::int64_t c0,
                                                         uint4* s) {
    const int t = threadIdx.x;
    if constexpr (Mode == kScalar) {
      Bits* se = reinterpret_cast<Bits*>(s);
      const int a0 = t / T, b = t % T;
      const bool col_in = c0 + b < cols;
      std::int64_t i = r0 + a0;
      std::int64_t off = i * ld_in + c0 + b;
      const std::int64_t step = kRowStep * ld_in;
#pragma unroll 1
      for (int b0 = 0; b0 < kScalarIters; b0 += kScalarBatch) {  // kScalarBatch loads in flight
        Bits v[kScalarBatch];
#pragma unroll
        for (int it = 0; it < kScalarBatch; ++it) {
          v[it] = (col_in && i + it * kRowStep < rows)
                      ? ScalarAccess<Bits>::template load<LoadH>(in + off + it * step)
                      : Bits{0};
        }
#pragma unroll
        for (int it = 0; it < kScalarBatch; ++it) se[b * P + a0 + (b0 + it) * kRowStep] = v[it];
        i += kScalarBatch * kRowStep;
        off += kScalarBatch * step;
      }
      return;
    } else {
      const int mc = t % kChunks;  // micro-block column (V input columns)
      const int mr = t / kChunks;  // micro-block row (V input rows)
      const std::int64_t i0 = r0 + V * mr, j = c0 + V * mc;
      const Bits* base = in + i0 * ld_in + j;
      Bits v[V][V];
      if constexpr (Mode == kWhole) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const uint4 x = load16<LoadH>(base + k * ld_in);
          std::memcpy(v[k], &x, 16);
        }
      } else {  // chunks lie wholly inside or outside (cols is a multiple of V)
        const bool col_in = j < cols;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          uint4 x = make_uint4(0, 0, 0, 0);
          if (col_in && i0 + k < rows) x = load16<LoadH>(base + k * ld_in);
          std::memcpy(v[k], &x, 16);
        }
      }
#pragma unroll
      for (int e = 0; e < V; ++e) {
        Bits w[V];
#pragma unroll
        for (int k = 0; k < V; ++k) w[k] = v[k][e];
        uint4 y;
        std::memcpy(&y, w, 16);
        const int row = V * mc + e;
        s[row * kChunks + swizzle(row, mr)] = y;
      }
    }
  }

  // Applies op to the transposed tile held in s and writes it to out rows orow0.., columns
  // ocol0.. of an out_rows x out_cols matrix; Mode as given to load_transposed. (op is applied
  // here, on V elements at a time, rather than on the V x V block the load holds: fewer live
  // registers for the scaled 16-bit kernels.)
  template <int Mode, typename Op>
  __device__ __forceinline__ static void store(const Op& op, const uint4* s, Bits* out,
                                               std::int64_t ld_out, std::int64_t out_rows,
                                               std::int64_t out_cols, std::int64_t orow0,
                                               std::int64_t ocol0) {
    const int t = threadIdx.x;
    if constexpr (Mode == kScalar) {
      const Bits* se = reinterpret_cast<const Bits*>(s);
      const int a0 = t / T, b = t % T;
      const bool col_in = ocol0 + b < out_cols;
      std::int64_t oi = orow0 + a0;
      std::int64_t off = oi * ld_out + ocol0 + b;
#pragma unroll 4
      for (int it = 0; it < kScalarIters; ++it) {
        if (col_in && oi < out_rows) {
          ScalarAccess<Bits>::template store<StoreH>(out + off,
                                                     op(se[(a0 + it * kRowStep) * P + b]));
        }
        oi += kRowStep;
        off += kRowStep * ld_out;
      }
    } else {
      const int q = t % kChunks;
      const std::int64_t oj = ocol0 + V * q;
      Bits* base = out + (orow0 + t / kChunks) * ld_out + oj;
      const bool col_in = oj < out_cols;  // out_cols is a multiple of V
#pragma unroll
      for (int it = 0; it < V; ++it) {
        const int row = t / kChunks + 16 * it;
        const uint4 y = apply(op, s[row * kChunks + swizzle(row, q)]);
        if (Mode == kWhole || (col_in && orow0 + row < out_rows)) {
          store16<StoreH>(base + 16 * it * ld_out, y);
        }
      }
    }
  }

  // Skewed path, for out-of-place transposes whose rows are not 16-byte aligned (8191 x 8193).
  // A warp store that starts in the middle of a 32-byte sector leaves partial sectors at both
  // ends, which L2 has to complete from DRAM: on the H100 a copy whose destination is off by one
  // fp32 element keeps 73% of cudaMemcpy's bandwidth, one whose source is off keeps 95.5%
  // (bench/store_alignment.cu). So the skewed tile moves the ragged edge to the load side:
  // output row j of the tile covers output columns [r0 - d(j), r0 - d(j) + T), where d(j) < E
  // shifts the segment's start onto a sector boundary. Every warp store then writes whole sectors;
  // the tile reads E more input rows (r0 - E ..) to cover the shifts, and the grid has ceil((rows +
  // E - 1) / T) tile rows. Shared tile: T input columns of kSkewRows input rows, padded so that a
  // warp's 32 column-strided writes and its row reads fall in distinct banks.
  static constexpr int E = 32 / static_cast<int>(sizeof(Bits));  // elements per 32-byte sector
  static constexpr int kSkewRows = T + E;
  static constexpr int PS = kSkewRows + kPad;
  static constexpr int kSkewLoadIters = (kSkewRows + kRowStep - 1) / kRowStep;
  // Loads in flight per thread: the iterations in even batches of at most 16.
  static constexpr int kSkewBatches = (kSkewLoadIters + 15) / 16;
  static constexpr int kSkewBatch = (kSkewLoadIters + kSkewBatches - 1) / kSkewBatches;
  static constexpr std::size_t kSkewSmemBytes =
      (static_cast<std::size_t>(T) * PS * sizeof(Bits) + 15) / 16 * 16;
  static constexpr std::size_t kSkewSmemVecs = kSkewSmemBytes / 16;

  // Tile rows of a rows x cols skewed transpose (the shifted segments reach E - 1 past rows).
  __host__ __device__ static constexpr std::int64_t skew_tile_rows(std::int64_t rows) {
    return (rows + E - 1 + T - 1) / T;
  }

  // Loads input rows r0 - E .. r0 + T - 1, columns c0 .. c0 + T - 1 into s (column-major: s
  // row = input column), element by element: a warp reads 32 consecutive elements of a row.
  __device__ __forceinline__ static void load_skewed(const Bits* in, std::int64_t ld_in,
                                                     std::int64_t rows, std::int64_t cols,
                                                     std::int64_t r0, std::int64_t c0, uint4* s) {
    Bits* se = reinterpret_cast<Bits*>(s);
    const int t = threadIdx.x;
    const int a0 = t / T, b = t % T;
    const bool col_in = c0 + b < cols;
    const std::int64_t first = r0 - E + a0;  // input row of local row a0
#pragma unroll 1
    for (int b0 = 0; b0 < kSkewLoadIters; b0 += kSkewBatch) {
      Bits v[kSkewBatch];
#pragma unroll
      for (int it = 0; it < kSkewBatch; ++it) {
        const int a = a0 + (b0 + it) * kRowStep;
        const std::int64_t i = first + static_cast<std::int64_t>(b0 + it) * kRowStep;
        v[it] = (col_in && a < kSkewRows && i >= 0 && i < rows)
                    ? ScalarAccess<Bits>::template load<LoadH>(in + i * ld_in + c0 + b)
                    : Bits{0};
      }
#pragma unroll
      for (int it = 0; it < kSkewBatch; ++it) {
        const int a = a0 + (b0 + it) * kRowStep;
        if (a < kSkewRows) se[b * PS + a] = v[it];
      }
    }
  }

  // Writes the tile loaded by load_skewed: output rows orow0 .. orow0 + T - 1 (input columns),
  // each from output column r0 - d to r0 - d + T - 1 (clipped to the matrix), d putting the
  // first element of the segment on a 32-byte boundary; op applied on the way out.
  template <typename Op>
  __device__ __forceinline__ static void store_skewed(const Op& op, const uint4* s, Bits* out,
                                                      std::int64_t ld_out, std::int64_t out_rows,
                                                      std::int64_t out_cols, std::int64_t orow0,
                                                      std::int64_t r0) {
    const Bits* se = reinterpret_cast<const Bits*>(s);
    const int t = threadIdx.x;
    const int a0 = t / T, ii = t % T;
    const auto base =
        static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(out) / sizeof(Bits));
#pragma unroll 4
    for (int it = 0; it < kScalarIters; ++it) {
      const int jl = a0 + it * kRowStep;
      const std::int64_t oi = orow0 + jl;
      if (oi >= out_rows) break;  // rows only grow with it
      const std::int64_t row = oi * ld_out;
      const int d = static_cast<int>((base + row + r0) & (E - 1));
      const std::int64_t oc = r0 - d + ii;
      if (oc >= 0 && oc < out_cols) {
        ScalarAccess<Bits>::template store<StoreH>(out + row + oc, op(se[jl * PS + ii - d + E]));
      }
    }
  }

  // The per-tile choice of an aligned (kWhole / kChunked) or unaligned (kScalar) kernel.
  template <bool Aligned>
  __device__ __forceinline__ static void load_tile(const Bits* in, std::int64_t ld_in,
                                                   std::int64_t rows, std::int64_t cols,
                                                   std::int64_t r0, std::int64_t c0, bool whole,
                                                   uint4* s) {
    if constexpr (!Aligned) {
      load_transposed<kScalar>(in, ld_in, rows, cols, r0, c0, s);
    } else if (whole) {
      load_transposed<kWhole>(in, ld_in, rows, cols, r0, c0, s);
    } else {
      load_transposed<kChunked>(in, ld_in, rows, cols, r0, c0, s);
    }
  }
  template <bool Aligned, typename Op>
  __device__ __forceinline__ static void store_tile(const Op& op, const uint4* s, Bits* out,
                                                    std::int64_t ld_out, std::int64_t out_rows,
                                                    std::int64_t out_cols, std::int64_t orow0,
                                                    std::int64_t ocol0, bool whole) {
    if constexpr (!Aligned) {
      store<kScalar>(op, s, out, ld_out, out_rows, out_cols, orow0, ocol0);
    } else if (whole) {
      store<kWhole>(op, s, out, ld_out, out_rows, out_cols, orow0, ocol0);
    } else {
      store<kChunked>(op, s, out, ld_out, out_rows, out_cols, orow0, ocol0);
    }
  }
};

// True when a rows x cols transpose can take the 16-byte modes (kWhole / kChunked): every row
// start of both matrices is 16-byte aligned and rows and cols are multiples of V (16 / elem),
// so that every 16-byte chunk lies wholly inside or outside both matrices.
inline bool vec16_ok(const void* in, std::int64_t ld_in, const void* out, std::int64_t ld_out,
                     std::int64_t rows, std::int64_t cols, std::size_t elem) {
  const auto a = reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out);
  const auto v = static_cast<std::int64_t>(16 / elem);
  return a % 16 == 0 && (static_cast<std::size_t>(ld_in) * elem) % 16 == 0 &&
         (static_cast<std::size_t>(ld_out) * elem) % 16 == 0 && rows % v == 0 && cols % v == 0;
}

}  // namespace matserve::kernels::transpose_detail
