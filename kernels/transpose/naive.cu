// Rung 1, naive transpose: one element per thread. A warp reads 32 consecutive elements of an
// input row (coalesced) but writes them down an output column, 32 separate sectors per store,
// so at most 1/8 (fp32) of each written sector is useful. The baseline the tiled rungs beat.
#include "kernels/transpose/transpose_common.cuh"
#include "kernels/transpose/transpose_kernels.h"

namespace matserve::kernels {
namespace {

using namespace transpose_detail;

constexpr int kTileCols = 32;  // threadIdx.x
constexpr int kTileRows = 8;   // threadIdx.y

template <typename Op>
__global__ void __launch_bounds__(kTileCols* kTileRows)
    naive_kernel(Op op, const typename Op::Bits* in, typename Op::Bits* out, std::int64_t rows,
                 std::int64_t cols, std::int64_t ld_in, std::int64_t ld_out, std::int64_t tiles_c,
                 std::int64_t tiles) {
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t i = (t / tiles_c) * kTileRows + threadIdx.y;
    const std::int64_t j = (t % tiles_c) * kTileCols + threadIdx.x;
    if (i < rows && j < cols) out[j * ld_out + i] = op(in[i * ld_in + j]);
  }
}

}  // namespace

cudaError_t launch_transpose_naive(const TransposeProblem& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.cols <= 0) return cudaSuccess;
  return dispatch_op(p, [&](auto op) {
    using Op = decltype(op);
    using Bits = typename Op::Bits;
    const std::int64_t tiles_c = ceil_div(p.cols, kTileCols);
    const std::int64_t tiles = tiles_c * ceil_div(p.rows, kTileRows);
    naive_kernel<Op><<<grid_for(tiles), dim3(kTileCols, kTileRows), 0, stream>>>(
        op, static_cast<const Bits*>(p.in), static_cast<Bits*>(p.out), p.rows, p.cols, p.ld_in,
        p.ld_out, tiles_c, tiles);
    return cudaGetLastError();
  });
}

}  // namespace matserve::kernels
