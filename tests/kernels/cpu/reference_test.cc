// The float64 references: the fast (dgemm) one agrees with the naive loop, and the thesis's
// special cases (identity, zero, single element) come out exactly.
#include "kernels/cpu/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/support/random_matrix.h"

namespace matserve::kernels {
namespace {

GemmProblem problem(std::int64_t m, std::int64_t n, std::int64_t k, const void* a, const void* b,
                    bool ta, bool tb) {
  GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a = a, p.b = b;
  p.a_trans = ta, p.b_trans = tb;
  p.lda = ta ? m : k;
  p.ldb = tb ? k : n;
  p.ldc = n;
  p.in_type = p.out_type = DType::kF64;
  p.precision = Precision::kF64;
  return p;
}

TEST(Reference, FastAgreesWithNaiveOnOddShapes) {
  for (auto [m, n, k] : {std::array<int, 3>{1, 1, 1}, {61, 17, 131}, {1, 33, 1}, {40, 1, 7}}) {
    for (int t = 0; t < 4; ++t) {
      auto a = testing::random_matrix(m * k, DType::kF64, 1);
      auto b = testing::random_matrix(k * n, DType::kF64, 2);
      auto c = testing::random_matrix(m * n, DType::kF64, 3);
      GemmProblem p = problem(m, n, k, a.data(), b.data(), t & 1, t & 2);
      p.alpha = 0.5;
      p.beta = 2.0;
      const auto fast = reference_gemm(p, c.data());
      const auto slow = reference_gemm_naive(p, c.data());
      ASSERT_EQ(fast.size(), slow.size());
      for (std::size_t i = 0; i < fast.size(); ++i) EXPECT_NEAR(fast[i], slow[i], 1e-12);
    }
  }
}

TEST(Reference, IdentityZeroAndSingleElement) {
  const std::int64_t n = 5;
  std::vector<double> eye(n * n, 0.0), x(n * n), zero(n * n, 0.0);
  for (int i = 0; i < n; ++i) eye[i * n + i] = 1.0;
  for (int i = 0; i < n * n; ++i) x[i] = i - 7.5;
  auto r = reference_gemm_naive(problem(n, n, n, eye.data(), x.data(), false, false), nullptr);
  EXPECT_EQ(r, x);
  r = reference_gemm_naive(problem(n, n, n, zero.data(), x.data(), false, false), nullptr);
  EXPECT_EQ(r, zero);
  const double a = 3.0, b = -2.0;
  r = reference_gemm_naive(problem(1, 1, 1, &a, &b, false, false), nullptr);
  EXPECT_EQ(r, std::vector<double>{-6.0});
}

TEST(Reference, CompareReportsErrorsAndNonFinite) {
  const std::vector<double> ref = {1.0, 2.0, 3.0, 4.0};
  std::vector<float> out = {1.0f, 2.0f, 3.0f, 4.5f};
  ErrorStats e = compare_with_reference(out.data(), DType::kF32, 2, 2, 2, ref);
  EXPECT_DOUBLE_EQ(e.max_abs_error, 0.5);
  EXPECT_NEAR(e.rel_l2_error, 0.5 / std::sqrt(30.0), 1e-12);
  out[0] = NAN;
  e = compare_with_reference(out.data(), DType::kF32, 2, 2, 2, ref);
  EXPECT_EQ(e.nonfinite, 1);
  EXPECT_TRUE(std::isinf(e.rel_l2_error));
}

}  // namespace
}  // namespace matserve::kernels
