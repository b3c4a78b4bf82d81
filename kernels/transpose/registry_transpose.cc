// Registry entries of the transpose kernels (naive, tiled, tuned, in-place).
#include "kernels/registry_parts.h"

namespace matserve::kernels::internal {

void append_transpose_kernel_variants(std::vector<TransposeVariant>& /*transpose*/) {}

}  // namespace matserve::kernels::internal
