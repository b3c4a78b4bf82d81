// Host stand-ins for the strided copies a plan asks for (what cudaMemcpy2D does on the device),
// and operands whose every product and sum is exact in float64: shared by the tests of the plans
// that move operand pieces (split_plan_test.cc, out_of_core_plan_test.cc).
#pragma once

#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "server/runtime/split_plan.h"

namespace matserve::testing {

// Packs the strided block `s` of the matrix at `from` into `to`.
inline void copy_strided(const void* from, const server::StridedBytes& s, std::byte* to) {
  const auto* src = static_cast<const std::byte*>(from) + s.offset_bytes;
  for (std::size_t r = 0; r < s.height; ++r) {
    std::memcpy(to + r * s.width_bytes, src + r * s.pitch_bytes, s.width_bytes);
  }
}

// Unpacks `from` into the strided block `s` of the matrix at `to` (a tile's result going back).
inline void place_strided(const std::byte* from, const server::StridedBytes& s, void* to) {
  auto* dst = static_cast<std::byte*>(to) + s.offset_bytes;
  for (std::size_t r = 0; r < s.height; ++r) {
    std::memcpy(dst + r * s.pitch_bytes, from + r * s.width_bytes, s.width_bytes);
  }
}

// Small nonzero integers: every product and sum is exact in float64, so any order of summation
// gives the same bits.
inline std::vector<double> random_integers(std::size_t count, std::mt19937& rng) {
  std::uniform_int_distribution<int> value(-4, 4);
  std::vector<double> v(count);
  for (double& x : v) x = value(rng) == 0 ? 1.0 : value(rng);
  return v;
}

}  // namespace matserve::testing
