// Rung 2, shared-memory tile: a 32 x 32 tile is read row by row (coalesced),
// held in shared memory and written out row by row of the output (coalesced too). The tile row is
// padded to 33 elements so that reading a tile column hits 32 different banks. Scale fused.
#include "kernels/transpose/transpose_common.cuh"
#include "kernels/transpose/transpose_kernels.h"

namespace matserve::kernels {
namespace {

using namespace transpose_detail;

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // blockDim = 32 x 8; each thread moves 4 elements

template <typename Op>
__global__ void __launch_bounds__(kTile* kRowsPerPass)
    tiled_kernel(Op op, const typename Op::Bits* __restrict__ in,
                 typename Op::Bits* __restrict__ out, std::int64_t rows, std::int64_t cols,
                 std::int64_t ld_in, std::int64_t ld_out, std::int64_t tiles_r,
                 std::int64_t tiles_c) {
  using Bits = typename Op::Bits;
  __shared__ Bits tile[kTile][kTile + 1];
  const int tx = threadIdx.x;
  const std::int64_t tiles = tiles_r * tiles_c;
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    // Diagonal block order (thesis): consecutive blocks differ in tile row and tile column.
    const std::int64_t x = t % tiles_c, y = t / tiles_c;
    const std::int64_t r0 = ((x + y) % tiles_r) * kTile;
    const std::int64_t c0 = x * kTile;
    for (int y = threadIdx.y; y < kTile; y += kRowsPerPass) {
      const std::int64_t i = r0 + y, j = c0 + tx;
      if (i < rows && j < cols) tile[y][tx] = op(in[i * ld_in + j]);
    }
    __syncthreads();
    for (int y = threadIdx.y; y < kTile; y += kRowsPerPass) {
      const std::int64_t oj = c0 + y, oi = r0 + tx;  // output row oj (input column), column oi
      if (oj < cols && oi < rows) out[oj * ld_out + oi] = tile[tx][y];
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_transpose_tiled(const TransposeProblem& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.cols <= 0) return cudaSuccess;
  return dispatch_op(p, [&](auto op) {
    using Op = decltype(op);
    using Bits = typename Op::Bits;
    const std::int64_t tiles_c = ceil_div(p.cols, kTile);
    const std::int64_t tiles_r = ceil_div(p.rows, kTile);
    tiled_kernel<Op><<<grid_for(tiles_r * tiles_c), dim3(kTile, kRowsPerPass), 0, stream>>>(
        op, static_cast<const Bits*>(p.in), static_cast<Bits*>(p.out), p.rows, p.cols, p.ld_in,
        p.ld_out, tiles_r, tiles_c);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
