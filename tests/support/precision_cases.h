// Per-precision test settings shared by the GEMM tests: the dtype a precision's operands are
// stored in. (What error each element may have is tests/support/gemm_bound.h's.)
#pragma once

#include "kernels/types.h"

namespace matserve::testing {

inline kernels::DType data_type(kernels::Precision p) {
  switch (p) {
    case kernels::Precision::kF64: return kernels::DType::kF64;
    case kernels::Precision::kF16: return kernels::DType::kF16;
    case kernels::Precision::kBF16: return kernels::DType::kBF16;
    default: return kernels::DType::kF32;
  }
}

}  // namespace matserve::testing
