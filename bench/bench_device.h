// Device helpers for the benchmarks: random non-zero fills (values in [-1, -0.01] U [0.01, 1],
// like the tests) and the relative L2 difference of two device arrays, accumulated in float64.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/types.h"

namespace matserve::bench {

cudaError_t fill_random(void* data, kernels::DType t, std::int64_t count, std::uint64_t seed,
                        cudaStream_t stream);

// ||x - y|| / ||y|| over `count` elements of type t; negative when the computation failed.
// Non-finite values in x make the result +inf.
double rel_l2_diff(const void* x, const void* y, kernels::DType t, std::int64_t count,
                   cudaStream_t stream);

}  // namespace matserve::bench
