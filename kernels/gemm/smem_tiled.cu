// Rungs 4 and 5, shared-memory tiling with 16x16 and 32x32 blocks: each block stages
// tiles of A' and B' in shared memory and every thread reads its k-slice from there, so global
// traffic drops by the tile width (16 or 32). No padding: op = T loads store with bank conflicts.
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/smem_tiled.cuh"

namespace matserve::kernels {
namespace {

struct AnyPrecision {
  template <typename F>
  cudaError_t operator()(const GemmProblem& p, F&& f) const {
    return simt::dispatch(p, std::forward<F>(f));
  }
};

}  // namespace

cudaError_t launch_gemm_smem_tiled_16(const GemmProblem& p, cudaStream_t stream) {
  return simt::launch_smem_tiled<16, 0>(p, stream, AnyPrecision{});
}

cudaError_t launch_gemm_smem_tiled_32(const GemmProblem& p, cudaStream_t stream) {
  return simt::launch_smem_tiled<32, 0>(p, stream, AnyPrecision{});
}

}  // namespace matserve::kernels
