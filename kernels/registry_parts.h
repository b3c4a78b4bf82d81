// Internal to the registry: each backend appends its own entries (registry_cpu.cc,
// registry_cuda.cc); registry.cc assembles them once. Not for use outside kernels/.
#pragma once

#include <vector>

#include "kernels/registry.h"

namespace matserve::kernels::internal {

void append_cpu_variants(std::vector<GemmVariant>& gemm, std::vector<TransposeVariant>& transpose);
void append_cuda_variants(std::vector<GemmVariant>& gemm, std::vector<TransposeVariant>& transpose);

// Per-family lists, each defined in its family's folder (gemm/registry_simt.cc,
// gemm/registry_tensor_core.cc, transpose/registry_transpose.cc).
void append_simt_gemm_variants(std::vector<GemmVariant>& gemm);
void append_tensor_core_gemm_variants(std::vector<GemmVariant>& gemm);
void append_transpose_kernel_variants(std::vector<TransposeVariant>& transpose);

}  // namespace matserve::kernels::internal
