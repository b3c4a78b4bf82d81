// Canonicalization: every layout and op() combination reduces to the row-major form correctly,
// checked by evaluating both forms element by element.
#include "kernels/gemm_problem.h"

#include <gtest/gtest.h>

#include <vector>

namespace matserve::kernels {
namespace {

// Element (r, c) of a stored matrix.
double stored(const std::vector<double>& d, const GemmOperandDesc& x, std::int64_t r,
              std::int64_t c) {
  return x.layout == Layout::kRowMajor ? d[r * x.cols + c] : d[c * x.rows + r];
}

TEST(Canonicalize, AllLayoutAndTransposeCombinations) {
  const std::int64_t m = 3, n = 4, k = 5;
  for (int bits = 0; bits < 32; ++bits) {
    GemmRequestDesc r;
    r.a.transpose = bits & 1;
    r.b.transpose = bits & 2;
    r.a.layout = (bits & 4) ? Layout::kColMajor : Layout::kRowMajor;
    r.b.layout = (bits & 8) ? Layout::kColMajor : Layout::kRowMajor;
    r.c_layout = (bits & 16) ? Layout::kColMajor : Layout::kRowMajor;
    r.a.rows = r.a.transpose ? k : m;
    r.a.cols = r.a.transpose ? m : k;
    r.b.rows = r.b.transpose ? n : k;
    r.b.cols = r.b.transpose ? k : n;
    std::vector<double> a(m * k), b(k * n), c(m * n, 0.0);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i) + 1;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.5 * static_cast<double>(i) - 3;
    r.a.data = a.data();
    r.b.data = b.data();
    r.c = c.data();
    const GemmProblem p = canonicalize_gemm(r);
    // Evaluate the canonical problem.
    const auto* pa = static_cast<const double*>(p.a);
    const auto* pb = static_cast<const double*>(p.b);
    auto* pc = static_cast<double*>(p.c);
    for (std::int64_t i = 0; i < p.m; ++i) {
      for (std::int64_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (std::int64_t q = 0; q < p.k; ++q) {
          s += (p.a_trans ? pa[q * p.lda + i] : pa[i * p.lda + q]) *
               (p.b_trans ? pb[j * p.ldb + q] : pb[q * p.ldb + j]);
        }
        pc[i * p.ldc + j] = s;
      }
    }
    // Compare with op(A) * op(B) evaluated from the user's description.
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          const double av = r.a.transpose ? stored(a, r.a, q, i) : stored(a, r.a, i, q);
          const double bv = r.b.transpose ? stored(b, r.b, j, q) : stored(b, r.b, q, j);
          s += av * bv;
        }
        const double got = r.c_layout == Layout::kRowMajor ? c[i * n + j] : c[j * m + i];
        ASSERT_EQ(got, s) << "combination " << bits << " at " << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace matserve::kernels
