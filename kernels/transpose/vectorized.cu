// Rung 3, tuned tile transpose: the tiled rung with 16-byte loads and stores and V x V register
// micro-blocks (vector_tile.cuh). Each thread has V independent 16-byte loads in flight and a warp
// moves 256-byte row segments both ways, so the copy engine's access pattern is matched while
// the tile rung issues 4-byte accesses. What takes it from ~75% to ~97% of copy bandwidth (H200,
// 8192^2 fp32) is the store hint: with plain stores Nsight Compute counted 1.75x the L2 write
// sectors of the output (14.7 M vs 8.4 M) though DRAM wrote the same bytes; streaming stores
// (st.global.cs, evict-first) bring it to 8.4 M, as for cuBLAS geam and the in-place kernel.
// Loads use the read-only path (ld.global.nc); blocks walk down tile columns, so consecutive
// blocks write neighbouring segments of the same output rows. Partial edge tiles keep 16-byte
// accesses predicated per chunk; rows that are not 16-byte aligned take coalesced element
// accesses through a skewed shared tile whose output segments start on 32-byte sectors
// (vector_tile.cuh: a store that splits sectors costs 30% of the bandwidth, a load that does
// 6%), in a separate instantiation chosen on the host so that the 16-byte kernel keeps 45
// registers (fp32; 5 blocks per SM). Tiles per block,
// order, hints and grid were chosen by measurement (transpose_bench's sweep, on the H200 and
// again on the H100: docs/benchmarks/transpose.md); the default is within a point of the best
// configuration on both.
#include <algorithm>
#include <type_traits>

#include "kernels/transpose/transpose_common.cuh"
#include "kernels/transpose/transpose_kernels.h"
#include "kernels/transpose/vector_tile.cuh"

namespace matserve::kernels {
namespace {

using namespace transpose_detail;

// Up to two tiles (tr[u], tc[u]) for work item w of a tiles_r x tiles_c grid, K tiles per item.
// Orders: row (consecutive blocks walk a tile row, so their writes stride down one column band),
// diagonal (the thesis's mapping against partition camping: consecutive blocks differ in tile row
// and column), mirror (K = 2: tile (I, J) with its mirror (J, I), the in-place square kernel's
// schedule, over the square part of the grid; the rest in diagonal pairs). Returns the count.
__device__ __forceinline__ int item_tiles(std::int64_t w, int k, int order, std::int64_t tiles_r,
                                          std::int64_t tiles_c, std::int64_t* tr,
                                          std::int64_t* tc) {
  std::int64_t rr = tiles_r, rc = tiles_c, off_r = 0, off_c = 0;
  if (order == kOrderMirror) {
    const std::int64_t sq = min(tiles_r, tiles_c);
    const std::int64_t pairs = sq * (sq + 1) / 2;
    if (w < pairs) {
      std::int64_t i, j;
      pair_of(w, i, j);
      tr[0] = i, tc[0] = j, tr[1] = j, tc[1] = i;
      return i == j ? 1 : 2;
    }
    w -= pairs;  // the remainder band beside (wide) or below (tall) the square
    if (tiles_c > sq) {
      rc = tiles_c - sq, off_c = sq;
    } else {
      rr = tiles_r - sq, off_r = sq;
    }
  }
  const std::int64_t tiles = rr * rc;
  int n = 0;
#pragma unroll
  for (int u = 0; u < 2; ++u) {  // constant indices: tr and tc stay in registers
    const std::int64_t t = w * k + u;
    if (u >= k || t >= tiles) break;
    const std::int64_t x = t % rc, y = t / rc;
    if (order == kOrderCol) {  // consecutive blocks walk down a tile column: writes stream
      tr[u] = off_r + t % rr;
      tc[u] = off_c + t / rr;
    } else {
      tc[u] = off_c + x;
      tr[u] = off_r + (order == kOrderRow ? y : (x + y) % rr);
    }
    n = u + 1;
  }
  return n;
}

std::int64_t item_count(int k, int order, std::int64_t tiles_r, std::int64_t tiles_c) {
  if (order != kOrderMirror) return ceil_div(tiles_r * tiles_c, k);
  const std::int64_t sq = std::min(tiles_r, tiles_c);
  return sq * (sq + 1) / 2 + ceil_div(tiles_r * tiles_c - sq * sq, 2);
}

// K tiles per block iteration: K x V 16-byte loads in flight per thread before the barrier.
// Aligned (16-byte aligned rows, chosen on the host): whole tiles unpredicated, edge tiles
// predicated per chunk; otherwise every tile moves element-wise through the skewed tile
// (vector_tile.cuh's load_skewed / store_skewed; tiles_r counts skewed tile rows).
template <typename Op, int K, int LoadH, int StoreH, bool Aligned>
__global__ void __launch_bounds__(256)
    vectorized_kernel(Op op, const typename Op::Bits* __restrict__ in,
                      typename Op::Bits* __restrict__ out, std::int64_t rows, std::int64_t cols,
                      std::int64_t ld_in, std::int64_t ld_out, std::int64_t tiles_r,
                      std::int64_t tiles_c, std::int64_t items, int order) {
  using Tile = VecTile<typename Op::Bits, LoadH, StoreH>;
  constexpr std::size_t kTileVecs = Aligned ? Tile::kSmemVecs : Tile::kSkewSmemVecs;
  extern __shared__ uint4 smem[];
  for (std::int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    std::int64_t tr[2], tc[2];
    const int n = item_tiles(w, K, order, tiles_r, tiles_c, tr, tc);
#pragma unroll
    for (int u = 0; u < K; ++u) {
      if (u >= n) break;
      const std::int64_t r0 = tr[u] * Tile::T, c0 = tc[u] * Tile::T;
      if constexpr (Aligned) {
        const bool whole = r0 + Tile::T <= rows && c0 + Tile::T <= cols;
        Tile::template load_tile<true>(in, ld_in, rows, cols, r0, c0, whole, smem + u * kTileVecs);
      } else {
        Tile::load_skewed(in, ld_in, rows, cols, r0, c0, smem + u * kTileVecs);
      }
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < K; ++u) {
      if (u >= n) break;
      const std::int64_t r0 = tr[u] * Tile::T, c0 = tc[u] * Tile::T;
      if constexpr (Aligned) {
        const bool whole = r0 + Tile::T <= rows && c0 + Tile::T <= cols;
        Tile::template store_tile<true>(op, smem + u * kTileVecs, out, ld_out, cols, rows, c0, r0,
                                        whole);
      } else {
        Tile::store_skewed(op, smem + u * kTileVecs, out, ld_out, cols, rows, c0, r0);
      }
    }
    __syncthreads();
  }
}

template <typename Op, int K, int LoadH, int StoreH, bool Aligned>
cudaError_t launch_kernel(Op op, const TransposeProblem& p, const VectorizedConfig& cfg,
                          cudaStream_t stream) {
  using Bits = typename Op::Bits;
  using Tile = VecTile<Bits>;
  const std::int64_t tiles_c = ceil_div(p.cols, Tile::T);
  const std::int64_t tiles_r = Aligned ? ceil_div(p.rows, Tile::T) : Tile::skew_tile_rows(p.rows);
  const std::int64_t items = item_count(K, cfg.order, tiles_r, tiles_c);
  constexpr std::size_t smem = K * (Aligned ? Tile::kSmemBytes : Tile::kSkewSmemBytes);
  auto* kernel = vectorized_kernel<Op, K, LoadH, StoreH, Aligned>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess) return attr;
  unsigned int grid = grid_for(items);
  if (cfg.persistent) {  // one wave: as many blocks as fit at once, each loops over items
    static const int resident = [&] {
      int dev = 0, sms = 0, per_sm = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Tile::kThreads, smem);
      return std::max(1, sms * per_sm);
    }();
    grid = std::min<unsigned int>(grid, static_cast<unsigned int>(resident));
  }
  kernel<<<grid, Tile::kThreads, smem, stream>>>(op, static_cast<const Bits*>(p.in),
                                                 static_cast<Bits*>(p.out), p.rows, p.cols, p.ld_in,
                                                 p.ld_out, tiles_r, tiles_c, items, cfg.order);
  return cudaGetLastError();
}

template <typename Op, int K, int LoadH, int StoreH>
cudaError_t launch_config(Op op, const TransposeProblem& p, const VectorizedConfig& cfg,
                          cudaStream_t stream) {
  if (vec16_ok(p.in, p.ld_in, p.out, p.ld_out, p.rows, p.cols, sizeof(typename Op::Bits))) {
    return launch_kernel<Op, K, LoadH, StoreH, true>(op, p, cfg, stream);
  }
  return launch_kernel<Op, K, LoadH, StoreH, false>(op, p, cfg, stream);
}

template <typename Op, int K>
cudaError_t launch_hints(Op op, const TransposeProblem& p, const VectorizedConfig& cfg,
                         cudaStream_t stream) {
  // Hinted versions only for the plain copy (scale == 1), the case the benchmark measures.
  if constexpr (std::is_same_v<Op, CopyOp<typename Op::Bits>>) {
    const int h = cfg.load_hint * 3 + cfg.store_hint;
    switch (h) {
      case kLoadNc * 3 + kStorePlain:
        return launch_config<Op, K, kLoadNc, kStorePlain>(op, p, cfg, stream);
      case kLoadPlain * 3 + kStoreCs:
        return launch_config<Op, K, kLoadPlain, kStoreCs>(op, p, cfg, stream);
      case kLoadNc * 3 + kStoreCs:
        return launch_config<Op, K, kLoadNc, kStoreCs>(op, p, cfg, stream);
      case kLoadCs * 3 + kStoreCs:
        return launch_config<Op, K, kLoadCs, kStoreCs>(op, p, cfg, stream);
      case kLoadNc * 3 + kStoreCg:
        return launch_config<Op, K, kLoadNc, kStoreCg>(op, p, cfg, stream);
      default: break;
    }
  } else if (cfg.load_hint == kLoadNc && cfg.store_hint == kStoreCs) {  // the default, scaled
    return launch_config<Op, K, kLoadNc, kStoreCs>(op, p, cfg, stream);
  }
  return launch_config<Op, K, kLoadPlain, kStorePlain>(op, p, cfg, stream);
}

}  // namespace

cudaError_t launch_transpose_vectorized_tuned(const TransposeProblem& p,
                                              const VectorizedConfig& cfg, cudaStream_t stream) {
  if (p.rows <= 0 || p.cols <= 0) return cudaSuccess;
  const int k = cfg.tiles_per_block, order = cfg.order;
  if (k != 1 && k != 2) return cudaErrorInvalidValue;
  if (order < kOrderRow || order > kOrderCol) return cudaErrorInvalidValue;
  if (order == kOrderMirror && k != 2) return cudaErrorInvalidValue;
  if (cfg.load_hint < 0 || cfg.load_hint > 2 || cfg.store_hint < 0 || cfg.store_hint > 2) {
    return cudaErrorInvalidValue;
  }
  return dispatch_op(p, [&](auto op) {
    return k == 2 ? launch_hints<decltype(op), 2>(op, p, cfg, stream)
                  : launch_hints<decltype(op), 1>(op, p, cfg, stream);
  });
}

cudaError_t launch_transpose_vectorized(const TransposeProblem& p, cudaStream_t stream) {
  const bool aligned =
      vec16_ok(p.in, p.ld_in, p.out, p.ld_out, p.rows, p.cols, dtype_size(p.dtype));
  return launch_transpose_vectorized_tuned(
      p, aligned ? kVectorizedDefault : kVectorizedUnalignedDefault, stream);
}

}  // namespace matserve::kernels
