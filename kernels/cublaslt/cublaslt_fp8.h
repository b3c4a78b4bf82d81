// cuBLASLt fp8 e4m3 GEMM variant (per-tensor scales, fp32 accumulate, bf16/fp32 out). Given
// fp32/fp16/bf16 data it quantizes on the device with amax scales; e4m3 data is used with scale 1.
#pragma once

#include "absl/status/status.h"
#include "kernels/gemm_problem.h"
#include "kernels/registry.h"

namespace matserve::kernels {

absl::Status cublaslt_fp8_can_implement(const GemmProblem& p);
absl::Status cublaslt_fp8_gemm(const GemmProblem& p, const ExecContext& ctx);
// True for e4m3 data: no scale to read back, so the launch may be captured as a CUDA graph.
bool cublaslt_fp8_capturable(const GemmProblem& p);

// How the last call applied the scales (reported by tests and benchmarks).
const char* cublaslt_fp8_scale_mode();

}  // namespace matserve::kernels
