// Reading and writing one element of any supported dtype as double/float on the host.
// The CPU backend, the float64 reference and the tests share these. Elements are copied with
// memcpy: a matrix in a shared-memory region may start at any byte offset, so its elements need
// not be aligned to their size (the compiler still emits one plain load or store).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/half.h"
#include "kernels/types.h"

namespace matserve::kernels {

// The element of type T at `index` of `base`, whatever the alignment.
template <typename T>
inline T load_unaligned(const void* base, std::int64_t index) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(base) + index * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
inline void store_unaligned(void* base, std::int64_t index, T v) {
  std::memcpy(static_cast<unsigned char*>(base) + index * sizeof(T), &v, sizeof(T));
}

inline double load_element(const void* base, DType t, std::int64_t index) {
  switch (t) {
    case DType::kF64: return load_unaligned<double>(base, index);
    case DType::kF32: return load_unaligned<float>(base, index);
    case DType::kF16: return half_to_float(load_unaligned<std::uint16_t>(base, index));
    case DType::kBF16: return bf16_to_float(load_unaligned<std::uint16_t>(base, index));
    case DType::kF8E4M3: return e4m3_to_float(static_cast<const std::uint8_t*>(base)[index]);
  }
  return 0.0;
}

inline void store_element(void* base, DType t, std::int64_t index, double v) {
  switch (t) {
    case DType::kF64: store_unaligned<double>(base, index, v); return;
    case DType::kF32: store_unaligned<float>(base, index, static_cast<float>(v)); return;
    case DType::kF16:
      store_unaligned<std::uint16_t>(base, index, float_to_half(static_cast<float>(v)));
      return;
    case DType::kBF16:
      store_unaligned<std::uint16_t>(base, index, float_to_bf16(static_cast<float>(v)));
      return;
    case DType::kF8E4M3:
      static_cast<std::uint8_t*>(base)[index] = float_to_e4m3(static_cast<float>(v));
      return;
  }
}

}  // namespace matserve::kernels
