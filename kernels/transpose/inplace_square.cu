// In-place square transpose (thesis kernel 2.4) on the tuned 16-byte tiles: block k owns the tile
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

template <typename Op>
__global__ void __launch_bounds__(256)
    inplace_square_kernel(Op op, typename Op::Bits* a, std::int64_t n, std::int64_t ld,
                          std::int64_t pairs, bool aligned) {
  using Tile = VecTile<typename Op::Bits>;
  extern __shared__ uint4 smem[];
  uint4* s_ij = smem;
  uint4* s_ji = smem + Tile::kSmemVecs;
  for (std::int64_t k = blockIdx.x; k < pairs; k += gridDim.x) {
    std::int64_t ti, tj;
    pair_of(k, ti, tj);
    const std::int64_t r0 = ti * Tile::T, c0 = tj * Tile::T;
    // The mirror tile is whole when this one is.
    const int mode = tile_mode(aligned, r0 + Tile::T <= n && c0 + Tile::T <= n);
    Tile::load_transposed(op, a, ld, n, n, r0, c0, mode, s_ij);
    if (ti != tj) Tile::load_transposed(op, a, ld, n, n, c0, r0, mode, s_ji);
    __syncthreads();
    Tile::store(s_ij, a, ld, n, n, c0, r0, mode);
    if (ti != tj) Tile::store(s_ji, a, ld, n, n, r0, c0, mode);
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_transpose_inplace_square(const TransposeProblem& p, cudaStream_t stream) {
  if (p.rows != p.cols || p.in != p.out || p.ld_in != p.ld_out) return cudaErrorInvalidValue;
  if (p.rows <= 0) return cudaSuccess;
  return dispatch_op(p, [&](auto op) {
    using Op = decltype(op);
    using Bits = typename Op::Bits;
    using Tile = VecTile<Bits>;
    const std::int64_t t = ceil_div(p.rows, Tile::T);
    const std::int64_t pairs = t * (t + 1) / 2;
    const bool aligned = rows_16b_aligned(p.in, p.ld_in, p.out, p.ld_out, sizeof(Bits));
    constexpr std::size_t smem = 2 * Tile::kSmemBytes;
    static const cudaError_t attr = cudaFuncSetAttribute(
        inplace_square_kernel<Op>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (attr != cudaSuccess) return attr;
    inplace_square_kernel<Op><<<grid_for(pairs), Tile::kThreads, smem, stream>>>(
        op, static_cast<Bits*>(p.out), p.rows, p.ld_in, pairs, aligned);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
