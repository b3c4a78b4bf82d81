// Registry entries of the tensor-core GEMM variants (WMMA, mma.sync, wgmma, cuBLASLt).
#include "kernels/registry_parts.h"

namespace matserve::kernels::internal {

void append_tensor_core_gemm_variants(std::vector<GemmVariant>& /*gemm*/) {}

}  // namespace matserve::kernels::internal
