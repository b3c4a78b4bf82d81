// cuBLASLt fp8 e4m3 GEMM variants (per-tensor scales, fp32 accumulate, bf16/fp32 out; promoted
// or fast accumulation). Given
// fp32/fp16/bf16 data it quantizes on the device with amax scales; e4m3 data is used with scale 1.
#pragma once

#include "absl/status/status.h"
#include "kernels/gemm_problem.h"
#include "kernels/registry.h"

namespace matserve::kernels {

absl::Status cublaslt_fp8_can_implement(const GemmProblem& p);
absl::Status cublaslt_fp8_fast_can_implement(const GemmProblem& p);
absl::Status cublaslt_fp8_gemm(const GemmProblem& p, const ExecContext& ctx);
// The same with fast accumulation: the tensor cores' fp32 sum is never promoted (see LtCall).
absl::Status cublaslt_fp8_fast_gemm(const GemmProblem& p, const ExecContext& ctx);
// True for e4m3 data: no scale to read back, so the launch may be captured as a CUDA graph.
bool cublaslt_fp8_capturable(const GemmProblem& p);

}  // namespace matserve::kernels
