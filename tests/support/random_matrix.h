// Test inputs: random non-zero matrices of any dtype as raw bytes, and poisoned outputs. Values
// are uniform in [-1, -0.01] U [0.01, 1] so that no element is zero and none dominates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/element.h"
#include "kernels/types.h"

namespace matserve::testing {

inline std::vector<std::byte> random_matrix(std::int64_t count, kernels::DType t,
                                            std::uint64_t seed) {
  std::vector<std::byte> out(static_cast<std::size_t>(count) * kernels::dtype_size(t));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> magnitude(0.01, 1.0);
  std::bernoulli_distribution negative(0.5);
  for (std::int64_t i = 0; i < count; ++i) {
    const double v = negative(rng) ? -magnitude(rng) : magnitude(rng);
    kernels::store_element(out.data(), t, i, v);
  }
  return out;
}

// All bits set: NaN in every floating-point format, so an element a kernel forgets to write (or
// a C it reads although beta == 0) shows up as NaN.
inline void poison(void* data, std::size_t bytes) {
  std::memset(data, 0xff, bytes);
}

}  // namespace matserve::testing
