// Registry entries of the CPU backend (OpenBLAS GEMM, blocked transpose).
#include "kernels/cpu/cpu_transpose.h"
#include "kernels/cpu/openblas_gemm.h"
#include "kernels/registry_parts.h"

namespace matserve::kernels::internal {

void append_cpu_variants(std::vector<GemmVariant>& gemm, std::vector<TransposeVariant>& transpose) {
  gemm.push_back(GemmVariant{
      .name = "cpu_openblas",
      .family = "cpu",
      .description = "OpenBLAS sgemm/dgemm; tf32/fp16/bf16/fp8 emulated by rounding the operands "
                     "to that format (fp8 with per-tensor scales) and accumulating in fp32",
      .constraints = "",
      .backend = Backend::kCpu,
      .precisions = kEveryPrecisionButF8 | precision_bit(Precision::kF8),
      .can_implement = nullptr,
      .launch = &openblas_gemm,
      .batched = true,
  });
  transpose.push_back(TransposeVariant{
      .name = "cpu_blocked",
      .family = "cpu",
      .description = "cache-blocked 32x32 transpose on the host; exact bit copy when scale is 1",
      .constraints = "",
      .backend = Backend::kCpu,
      .in_place = false,
      .can_implement = nullptr,
      .launch = &cpu_blocked_transpose,
  });
  transpose.push_back(TransposeVariant{
      .name = "cpu_inplace",
      .family = "cpu",
      .description = "in-place transpose of a resident matrix through a host scratch copy",
      .constraints = "",
      .backend = Backend::kCpu,
      .in_place = true,
      .can_implement = nullptr,
      .launch = &cpu_inplace_transpose,
  });
}

}  // namespace matserve::kernels::internal
