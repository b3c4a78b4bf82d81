// Device helpers for the benchmarks: random non-zero fills (values in [-1, -0.01] U [0.01, 1],
// like the tests), the relative L2 difference of two device arrays, accumulated in float64, the
// operands of one square GEMM, and the median event time of repeated device work.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"
#include "kernels/gemm_problem.h"
#include "kernels/types.h"

namespace matserve::bench {

cudaError_t fill_random(void* data, kernels::DType t, std::int64_t count, std::uint64_t seed,
                        cudaStream_t stream);

// ||x - y|| / ||y|| over `count` elements of type t; negative when the computation failed.
// Non-finite values in x make the result +inf.
double rel_l2_diff(const void* x, const void* y, kernels::DType t, std::int64_t count,
                   cudaStream_t stream);

// An n x n x n problem on the device: random non-zero row-major A and B (filled on `stream`,
// which the caller synchronizes before timing), C uninitialised, no transposes, alpha 1, beta 0;
// with batch > 1, that many products stacked one after another (a strided batch).
// `problem` points into the buffers, which move with the struct.
struct SquareGemm {
  kernels::DeviceBuffer a, b, c;
  kernels::GemmProblem problem;
};
absl::StatusOr<SquareGemm> make_square_gemm(std::int64_t n, kernels::DType dtype,
                                            kernels::Precision precision, cudaStream_t stream,
                                            std::int64_t batch = 1);

// Median (upper) milliseconds of `reps` calls of `call`, each between two CUDA events on `stream`
// and waited for, after `warmup` untimed ones; negative when `call` returns false or an event
// fails.
double event_time_ms(cudaStream_t stream, int warmup, int reps, const std::function<bool()>& call);

}  // namespace matserve::bench
