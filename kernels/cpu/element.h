// Reading and writing one element of any supported dtype as double/float on the host.
// The CPU backend, the float64 reference and the tests share these.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/half.h"
#include "kernels/types.h"

namespace matserve::kernels {

inline double load_element(const void* base, DType t, std::int64_t index) {
  switch (t) {
    case DType::kF64: return static_cast<const double*>(base)[index];
    case DType::kF32: return static_cast<const float*>(base)[index];
    case DType::kF16: return half_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::kBF16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::kF8E4M3: return e4m3_to_float(static_cast<const std::uint8_t*>(base)[index]);
  }
  return 0.0;
}

inline void store_element(void* base, DType t, std::int64_t index, double v) {
  switch (t) {
    case DType::kF64: static_cast<double*>(base)[index] = v; return;
    case DType::kF32: static_cast<float*>(base)[index] = static_cast<float>(v); return;
    case DType::kF16:
      static_cast<std::uint16_t*>(base)[index] = float_to_half(static_cast<float>(v));
      return;
    case DType::kBF16:
      static_cast<std::uint16_t*>(base)[index] = float_to_bf16(static_cast<float>(v));
      return;
    case DType::kF8E4M3:
      static_cast<std::uint8_t*>(base)[index] = float_to_e4m3(static_cast<float>(v));
      return;
  }
}

}  // namespace matserve::kernels
