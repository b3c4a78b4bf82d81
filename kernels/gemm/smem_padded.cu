// Rung 6, tiling + padding: the 32x32 shared-memory tiled kernel with one extra word per shared
// row. The column-wise stores that transposed operands need (and any strided shared access) then
// fall into 32 different banks instead of one, so op(A)/op(B) = T cost no 32-way conflicts.
#include "kernels/gemm/simt_kernels.h"
#include "kernels/gemm/smem_tiled.cuh"

namespace matserve::kernels {
namespace {

struct Fp32Only {
  template <typename F>
  cudaError_t operator()(const GemmProblem& p, F&& f) const {
    return simt::dispatch_f32(p, std::forward<F>(f));
  }
};

}  // namespace

cudaError_t launch_gemm_smem_padded(const GemmProblem& p, cudaStream_t stream) {
  return simt::launch_smem_tiled<32, 1>(p, stream, Fp32Only{});
}

}  // namespace matserve::kernels
