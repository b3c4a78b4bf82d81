// Per-precision test settings shared by the GEMM tests: the dtype a precision's operands are
// stored in, and the relative L2 error allowed against the float64 reference.
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

inline double tolerance(kernels::Precision p) {
  switch (p) {
    case kernels::Precision::kF64: return 1e-12;
    case kernels::Precision::kF32: return 1e-5;
    case kernels::Precision::kTF32: return 5e-3;
    default: return 1e-2;
  }
}

}  // namespace matserve::testing
