// Launchers of the CUDA-core (SIMT) GEMM ladder, one per kernels/gemm/<name>.cu, in ladder order.
// Each computes the canonical GemmProblem (any m, n, k >= 1, both operand orders, alpha/beta) on
// `stream` and returns the launch error; registry_simt.cc adapts them to the registry.
// fp32 for all; fp64 (T = double) where the registry says so. Plain header: no absl.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/gemm_problem.h"

namespace matserve::kernels {

cudaError_t launch_gemm_naive(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_unrolled(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_coalesced(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_smem_tiled_16(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_smem_tiled_32(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_smem_padded(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_smem_prefetch(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_coarsened(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_reg_private(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_blocktile_1d(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_blocktile_2d(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_vectorized_2d(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_warptile(const GemmProblem& p, cudaStream_t stream);
// The top rung: warptiling + cp.async multi-stage pipeline. The plain entry picks its tile
// configuration per shape; the suffixed ones pin one configuration (for the autotune table).
cudaError_t launch_gemm_simt_pipelined(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_simt_pipelined_128x128(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_simt_pipelined_128x128_k16(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_simt_pipelined_128x128_cpasync(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_simt_pipelined_64x64(const GemmProblem& p, cudaStream_t stream);
// Past the top rung: conflict-free LDS.128 lane layout, register-double-buffered fragments, a
// two-stage LDG -> STS ring and an unchecked interior path; plain entry chooses tiles per shape.
cudaError_t launch_gemm_simt_tuned(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_simt_tuned_128x128(const GemmProblem& p, cudaStream_t stream);
cudaError_t launch_gemm_simt_tuned_64x64(const GemmProblem& p, cudaStream_t stream);

}  // namespace matserve::kernels
