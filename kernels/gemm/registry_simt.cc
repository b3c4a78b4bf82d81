// Registry entries of the CUDA-core (SIMT) GEMM ladder, naive first.
#include "kernels/registry_parts.h"

namespace matserve::kernels::internal {

void append_simt_gemm_variants(std::vector<GemmVariant>& /*gemm*/) {}

}  // namespace matserve::kernels::internal
