// The CPU backend's GEMM against the naive float64 reference: odd shapes, all four transpose
// states, alpha/beta, every precision, each element within its precision's rounding bound
// (tests/support/gemm_bound.h), and a probe that tells the reduced precisions apart.
#include "kernels/cpu/openblas_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "kernels/cpu/reference.h"
#include "tests/support/gemm_bound.h"
#include "tests/support/precision_cases.h"
#include "tests/support/precision_probe.h"
#include "tests/support/random_matrix.h"

namespace matserve::kernels {
namespace {

using testing::data_type;

struct Shape {
  std::int64_t m, n, k;
};

class OpenblasGemm : public ::testing::TestWithParam<std::tuple<Precision, int>> {};

TEST_P(OpenblasGemm, MatchesNaiveFloat64Reference) {
  const auto [prec, trans] = GetParam();
  const DType in = prec == Precision::kF64    ? DType::kF64
                   : prec == Precision::kF16  ? DType::kF16
                   : prec == Precision::kBF16 ? DType::kBF16
                                              : DType::kF32;
  std::uint64_t seed = 10;
  for (Shape s : {Shape{1, 1, 1}, Shape{7, 5, 3}, Shape{61, 17, 131}, Shape{1, 97, 1},
                  Shape{97, 1, 1}, Shape{1, 1, 300}, Shape{200, 3, 2}, Shape{3, 200, 2}}) {
    for (double beta : {0.0, 2.0}) {
      auto a = testing::random_matrix(s.m * s.k, in, seed++);
      auto b = testing::random_matrix(s.k * s.n, in, seed++);
      auto c = testing::random_matrix(s.m * s.n, in, seed++);
      if (beta == 0.0) testing::poison(c.data(), c.size());
      const std::vector<std::byte> c0 = c;
      GemmProblem p;
      p.m = s.m, p.n = s.n, p.k = s.k;
      p.a_trans = trans & 1;
      p.b_trans = trans & 2;
      p.lda = p.a_trans ? s.m : s.k;
      p.ldb = p.b_trans ? s.k : s.n;
      p.ldc = s.n;
      p.a = a.data(), p.b = b.data(), p.c = c.data();
      p.in_type = p.out_type = in;
      p.precision = prec;
      p.alpha = 0.5;
      p.beta = beta;
      const auto ref = reference_gemm_naive(p, c0.data());
      const auto magnitude = testing::gemm_magnitude(p, c0.data());
      ASSERT_TRUE(openblas_gemm(p, {}).ok());
      const testing::GemmCheck e = testing::check_gemm(p, c.data(), s.n, ref, magnitude);
      EXPECT_TRUE(e.ok()) << s.m << "x" << s.n << "x" << s.k << " beta=" << beta << ": "
                          << e.summary();
    }
  }
}

// A large thin-k problem whose sides are no multiple of any tile (as 4095 x 4097 x 33 on the
// GPU, smaller): one wrong 32 x 32 tile, or one column missing a k-term, moves the relative L2
// error over the whole matrix by less than a reduced precision's rounding, but puts those
// elements outside their own bound.
class OpenblasGemmEdgeShape : public ::testing::TestWithParam<Precision> {};

TEST_P(OpenblasGemmEdgeShape, EveryElementWithinItsBound) {
  const Precision prec = GetParam();
  const DType in = data_type(prec);
  constexpr std::int64_t kM = 1023, kN = 1025, kK = 33;
  for (double beta : {0.0, 2.0}) {
    auto a = testing::random_matrix(kM * kK, in, 40);
    auto b = testing::random_matrix(kK * kN, in, 41);
    auto c = testing::random_matrix(kM * kN, in, 42);
    if (beta == 0.0) testing::poison(c.data(), c.size());
    const std::vector<std::byte> c0 = c;
    GemmProblem p;
    p.m = kM, p.n = kN, p.k = kK;
    p.lda = kK, p.ldb = kN, p.ldc = kN;
    p.a = a.data(), p.b = b.data(), p.c = c.data();
    p.in_type = p.out_type = in;
    p.precision = prec;
    p.alpha = 0.5;
    p.beta = beta;
    const auto ref = reference_gemm(p, c0.data());
    const auto magnitude = testing::gemm_magnitude(p, c0.data());
    ASSERT_TRUE(openblas_gemm(p, {}).ok());
    const testing::GemmCheck e = testing::check_gemm(p, c.data(), kN, ref, magnitude);
    EXPECT_TRUE(e.ok()) << precision_name(prec) << " beta=" << beta << ": " << e.summary();
  }
}

INSTANTIATE_TEST_SUITE_P(AllPrecisions, OpenblasGemmEdgeShape,
                         ::testing::Values(Precision::kF64, Precision::kF32, Precision::kTF32,
                                           Precision::kF16, Precision::kBF16));

INSTANTIATE_TEST_SUITE_P(AllPrecisionsAllTransposeStates, OpenblasGemm,
                         ::testing::Combine(::testing::Values(Precision::kF64, Precision::kF32,
                                                              Precision::kTF32, Precision::kF16,
                                                              Precision::kBF16),
                                            ::testing::Range(0, 4)));

// fp32 data computed in each precision: every probe value comes out as that format rounds it, so
// fp16, bf16 and tf32 are told apart from each other and from fp32 (precision_probe.h).
TEST(OpenblasGemm, EachPrecisionRoundsAsItsFormat) {
  const auto& probe = testing::precision_probe();
  std::vector<float> a;
  for (const testing::ProbeValue& v : probe) a.push_back(v.in);
  const float b = 1.0f;
  for (Precision prec : {Precision::kF32, Precision::kTF32, Precision::kF16, Precision::kBF16}) {
    std::vector<float> c(a.size(), NAN);
    GemmProblem p;
    p.m = static_cast<std::int64_t>(a.size());
    p.n = p.k = 1;
    p.lda = p.ldb = p.ldc = 1;
    p.a = a.data(), p.b = &b, p.c = c.data();
    p.precision = prec;
    ASSERT_TRUE(openblas_gemm(p, {}).ok());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(c[i], testing::probe_expected(probe[i], prec))
          << precision_name(prec) << " probe " << i << " (" << a[i] << ")";
    }
  }
}

TEST(OpenblasGemm, Fp16InputsWithFp32Output) {
  auto a = testing::random_matrix(6, DType::kF16, 1);
  auto b = testing::random_matrix(6, DType::kF16, 2);
  std::vector<float> c(4, NAN);
  GemmProblem p;
  p.m = 2, p.n = 2, p.k = 3, p.lda = 3, p.ldb = 2, p.ldc = 2;
  p.a = a.data(), p.b = b.data(), p.c = c.data();
  p.in_type = DType::kF16;
  p.out_type = DType::kF32;
  p.precision = Precision::kF16;
  const auto ref = reference_gemm_naive(p, nullptr);
  ASSERT_TRUE(openblas_gemm(p, {}).ok());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(c[i], ref[i], 1e-6);
}

}  // namespace
}  // namespace matserve::kernels

namespace matserve::kernels {
namespace {

// A batch through host pointer arrays in a shuffled order (product z reads matrices count-1-z)
// and through strides with B broadcast: each product equals its own float64 reference.
TEST(OpenblasGemm, BatchedProductsEachMatchTheirReference) {
  constexpr std::int64_t kM = 7, kN = 5, kK = 3, kCount = 4;
  auto a = testing::random_matrix(kM * kK * kCount, DType::kF32, 1);
  auto b = testing::random_matrix(kK * kN, DType::kF32, 2);
  auto c = testing::random_matrix(kM * kN * kCount, DType::kF32, 3);
  const std::vector<std::byte> c0 = c;
  GemmProblem p;
  p.m = kM;
  p.n = kN;
  p.k = kK;
  p.lda = kK;
  p.ldb = kN;
  p.ldc = kN;
  p.alpha = 0.5;
  p.beta = 2.0;
  p.batch.count = kCount;
  p.batch.stride_a = kM * kK;
  p.batch.stride_b = 0;
  p.batch.stride_c = kM * kN;
  p.a = a.data();
  p.b = b.data();
  p.c = c.data();
  ASSERT_TRUE(openblas_gemm(p, {}).ok());
  // Product z's operands located here by hand (not with host_product, which the code uses): A at
  // z matrices in, B the one broadcast matrix, C z matrices in.
  for (std::int64_t z = 0; z < kCount; ++z) {
    GemmProblem one = p;
    one.batch = GemmBatch{};
    one.a = a.data() + z * kM * kK * 4;
    one.b = b.data();
    const std::byte* before = c0.data() + z * kM * kN * 4;
    const testing::GemmCheck e =
        testing::check_gemm(one, c.data() + z * kM * kN * 4, kN, reference_gemm_naive(one, before),
                            testing::gemm_magnitude(one, before));
    EXPECT_TRUE(e.ok()) << "strided product " << z << ": " << e.summary();
  }

  std::vector<std::byte> d = c0;
  std::vector<const void*> as, bs;
  std::vector<void*> cs;
  for (std::int64_t z = 0; z < kCount; ++z) {
    as.push_back(a.data() + (kCount - 1 - z) * kM * kK * 4);
    bs.push_back(b.data());
    cs.push_back(d.data() + (kCount - 1 - z) * kM * kN * 4);
  }
  GemmProblem q = p;
  q.batch.a_array = as.data();
  q.batch.b_array = bs.data();
  q.batch.c_array = cs.data();
  ASSERT_TRUE(openblas_gemm(q, {}).ok());
  for (std::int64_t z = 0; z < kCount; ++z) {
    GemmProblem one = p;
    one.batch = GemmBatch{};
    one.a = as[static_cast<std::size_t>(z)];
    const std::byte* before = c0.data() + (kCount - 1 - z) * kM * kN * 4;
    const testing::GemmCheck e = testing::check_gemm(one, cs[static_cast<std::size_t>(z)], kN,
                                                     reference_gemm_naive(one, before),
                                                     testing::gemm_magnitude(one, before));
    EXPECT_TRUE(e.ok()) << "pointer-array product " << z << ": " << e.summary();
  }
}

}  // namespace
}  // namespace matserve::kernels
