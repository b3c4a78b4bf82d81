// In-place square transpose on the tuned 16-byte tiles: block k owns the tile
// pair (I, J), I <= J, loads both tiles (transposed) into shared memory, waits, and writes each
// into the other's place; a diagonal tile is its own partner. Every element is read once and
// written once, as out of place, with no scratch: the resident matrix needs no second buffer.
#include <cmath>

#include "kernels/transpose/transpose_common.cuh"
#include "kernels/transpose/transpose_kernels.h"
#include "kernels/transpose/vector_tile.cuh"

namespace matserve::kernels {
namespace {

using namespace transpose_detail;

template <typename Op, bool Aligned>
__global__ void __launch_bounds__(256)
    inplace_square_kernel(Op op, typename Op::Bits* a, std::int64_t n, std::int64_t ld,
                          std::int64_t pairs) {
  using Tile = VecTile<typename Op::Bits>;
  extern __shared__ uint4 smem[];
  uint4* s_ij = smem;
  uint4* s_ji = smem + Tile::kSmemVecs;
  for (std::int64_t k = blockIdx.x; k < pairs; k += gridDim.x) {
    std::int64_t ti, tj;
    pair_of(k, ti, tj);
    const std::int64_t r0 = ti * Tile::T, c0 = tj * Tile::T;
    // The mirror tile is whole when this one is.
    const bool whole = r0 + Tile::T <= n && c0 + Tile::T <= n;
    Tile::template load_tile<Aligned>(a, ld, n, n, r0, c0, whole, s_ij);
    if (ti != tj) Tile::template load_tile<Aligned>(a, ld, n, n, c0, r0, whole, s_ji);
    __syncthreads();
    Tile::template store_tile<Aligned>(op, s_ij, a, ld, n, n, c0, r0, whole);
    if (ti != tj) Tile::template store_tile<Aligned>(op, s_ji, a, ld, n, n, r0, c0, whole);
    __syncthreads();
  }
}

// One launch of the Aligned instantiation (each has its own shared-memory attribute: two tiles
// of 16-bit elements need more than the default 48 KB).
template <typename Op, bool Aligned>
cudaError_t launch_square(Op op, const TransposeProblem& p, cudaStream_t stream) {
  using Bits = typename Op::Bits;
  using Tile = VecTile<Bits>;
  const std::int64_t t = ceil_div(p.rows, Tile::T);
  const std::int64_t pairs = t * (t + 1) / 2;
  constexpr std::size_t smem = 2 * Tile::kSmemBytes;
  auto* kernel = inplace_square_kernel<Op, Aligned>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess) return attr;
  kernel<<<grid_for(pairs), Tile::kThreads, smem, stream>>>(op, static_cast<Bits*>(p.out), p.rows,
                                                            p.ld_in, pairs);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_transpose_inplace_square(const TransposeProblem& p, cudaStream_t stream) {
  if (p.rows != p.cols || p.in != p.out || p.ld_in != p.ld_out) return cudaErrorInvalidValue;
  if (p.rows <= 0) return cudaSuccess;
  return dispatch_op(p, [&](auto op) {
    using Op = decltype(op);
    return vec16_ok(p.in, p.ld_in, p.out, p.ld_out, p.rows, p.cols, sizeof(typename Op::Bits))
               ? launch_square<Op, true>(op, p, stream)
               : launch_square<Op, false>(op, p, stream);
  });
}

}  // namespace matserve::kernels
