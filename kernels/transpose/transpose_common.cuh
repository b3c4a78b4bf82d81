// Device helpers shared by the transpose kernels: the element operation (bit copy when scale == 1,
// otherwise a multiply in the element's own precision, fp16/bf16 through fp32, matching the CPU
// backend bit for bit), dtype dispatch, fast 32-bit division and the 1-D tile schedule.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/transpose_problem.h"

namespace matserve::kernels::transpose_detail {

template <typename B>
struct CopyOp {
  using Bits = B;
  __device__ __forceinline__ Bits operator()(Bits v) const { return v; }
};

struct ScaleF64 {
  using Bits = std::uint64_t;
  double s;
  __device__ __forceinline__ Bits operator()(Bits v) const {
    return static_cast<Bits>(__double_as_longlong(__dmul_rn(__longlong_as_double(v), s)));
  }
};

struct ScaleF32 {
  using Bits = std::uint32_t;
  float s;
  __device__ __forceinline__ Bits operator()(Bits v) const {
    return __float_as_uint(__fmul_rn(__uint_as_float(v), s));
  }
};

struct ScaleF16 {
  using Bits = std::uint16_t;
  float s;
  __device__ __forceinline__ Bits operator()(Bits v) const {
    return __half_as_ushort(__float2half_rn(__fmul_rn(__half2float(__ushort_as_half(v)), s)));
  }
};

struct ScaleBF16 {
  using Bits = std::uint16_t;
  float s;
  __device__ __forceinline__ Bits operator()(Bits v) const {
    const float f = __uint_as_float(static_cast<std::uint32_t>(v) << 16);
    return __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(f, s)));
  }
};

// Calls f(op) with the element operation for p's dtype and scale; returns what f returns.
template <typename F>
cudaError_t dispatch_op(const TransposeProblem& p, F&& f) {
  if (p.scale == 1.0) {
    switch (dtype_size(p.dtype)) {
      case 8: return f(CopyOp<std::uint64_t>{});
      case 4: return f(CopyOp<std::uint32_t>{});
      case 2: return f(CopyOp<std::uint16_t>{});
      default: return cudaErrorInvalidValue;
    }
  }
  switch (p.dtype) {
    case DType::kF64: return f(ScaleF64{p.scale});
    case DType::kF32: return f(ScaleF32{static_cast<float>(p.scale)});
    case DType::kF16: return f(ScaleF16{static_cast<float>(p.scale)});
    case DType::kBF16: return f(ScaleBF16{static_cast<float>(p.scale)});
  }
  return cudaErrorInvalidValue;
}

// Unsigned 32-bit division by a run-time constant d >= 1 (Granlund-Montgomery): a multiply-high,
// an add and a shift instead of a ~20-instruction division. Exact for every 32-bit numerator.
struct FastDiv {
  std::uint32_t d = 1, mul = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(std::uint32_t divisor) : d(divisor) {
    shift = 0;
    while ((std::uint64_t{1} << shift) < d) ++shift;
    mul = static_cast<std::uint32_t>(
        ((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ std::uint32_t div(std::uint32_t n) const {
    const std::uint32_t t = __umulhi(n, mul);
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(t) + n) >> shift);
  }
  __device__ __forceinline__ std::uint32_t mod(std::uint32_t n) const { return n - div(n) * d; }
};

// Grid size for a grid-stride loop over `work` items (1-D: no 65535 limit on y to worry about).
inline unsigned int grid_for(std::int64_t work, std::int64_t cap = 1 << 20) {
  const std::int64_t g = work < cap ? work : cap;
  return static_cast<unsigned int>(g < 1 ? 1 : g);
}

__host__ __device__ inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// Pair k of the upper triangle of a tile grid, row by row of J: I <= J with
// J (J + 1) / 2 <= k < (J + 1) (J + 2) / 2 and I = k - J (J + 1) / 2.
__device__ __forceinline__ void pair_of(std::int64_t k, std::int64_t& i, std::int64_t& j) {
  auto jj = static_cast<std::int64_t>((sqrt(8.0 * static_cast<double>(k) + 1.0) - 1.0) / 2.0);
  while (jj * (jj + 1) / 2 > k) --jj;
  while ((jj + 1) * (jj + 2) / 2 <= k) ++jj;
  j = jj;
  i = k - jj * (jj + 1) / 2;
}

}  // namespace matserve::kernels::transpose_detail
