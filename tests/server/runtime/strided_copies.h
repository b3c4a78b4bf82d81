// Host stand-ins for the strided copies a plan asks for (what cudaMemcpy2D does on the device),
// operands whose every product and sum is exact in float64, a tile computed from packed copies,
// and the check that the assembled C equals the whole product: shared by the tests of the plans
// that move operand pieces (split_plan_test.cc, out_of_core_plan_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/reference.h"
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

// An fp64 product (alpha 2, beta -1) of small integers whose A, B and C are stored with leading
// dimensions wider than their rows, so that a wrong stride shows; `p` reads a and b (its C is
// null: each test says where C goes), c0 is C's starting value.
struct StridedProduct {
  std::vector<double> a, b, c0;
  kernels::GemmProblem p;
};

inline StridedProduct strided_product(std::int64_t m, std::int64_t n, std::int64_t k, bool a_trans,
                                      bool b_trans, std::mt19937& rng) {
  const std::int64_t lda = (a_trans ? m : k) + 3;
  const std::int64_t ldb = (b_trans ? k : n) + 2;
  const std::int64_t ldc = n + 1;
  StridedProduct s;
  s.a = random_integers(static_cast<std::size_t>((a_trans ? k : m) * lda), rng);
  s.b = random_integers(static_cast<std::size_t>((b_trans ? n : k) * ldb), rng);
  s.c0 = random_integers(static_cast<std::size_t>(m * ldc), rng);
  s.p = kernels::GemmProblem{.m = m,
                             .n = n,
                             .k = k,
                             .a = s.a.data(),
                             .lda = lda,
                             .a_trans = a_trans,
                             .b = s.b.data(),
                             .ldb = ldb,
                             .b_trans = b_trans,
                             .c = nullptr,
                             .ldc = ldc,
                             .in_type = kernels::DType::kF64,
                             .out_type = kernels::DType::kF64,
                             .precision = kernels::Precision::kF64,
                             .alpha = 2.0,
                             .beta = -1.0};
  return s;
}

// Block `block` of p's C computed as a device computes a tile: C's block packed from `c0` into
// `c_at`, the product of the packed A' rows at `a_at` and B' columns at `b_at` with it (the
// float64 reference) into `c_at`, and the result placed into its block of `c`.
inline void compute_packed_tile(const kernels::GemmProblem& p, const server::CBlock& block,
                                const std::byte* a_at, const std::byte* b_at,
                                const std::vector<double>& c0, std::byte* c_at,
                                std::vector<double>& c) {
  const server::StridedBytes cs = server::c_block(p, block);
  copy_strided(c0.data(), cs, c_at);
  const kernels::GemmProblem tile = server::packed(p, block, a_at, b_at, c_at);
  const std::vector<double> out = kernels::reference_gemm_naive(tile, c_at);
  std::memcpy(c_at, out.data(), cs.packed_bytes());
  place_strided(c_at, cs, c.data());
}

// Whether every element of the m x n C in `c` (leading dimension ldc) equals the whole product
// (`whole`, dense m x n); the first that differs is named.
inline ::testing::AssertionResult equals_whole(const std::vector<double>& c, std::int64_t ldc,
                                               const std::vector<double>& whole, std::int64_t m,
                                               std::int64_t n) {
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const double got = c[static_cast<std::size_t>(i * ldc + j)];
      const double want = whole[static_cast<std::size_t>(i * n + j)];
      if (got != want) {
        return ::testing::AssertionFailure()
               << "at (" << i << ", " << j << "): " << got << ", the whole product " << want;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace matserve::testing
