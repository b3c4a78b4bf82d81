// Float64 references and error measures: see reference.h.
#include "kernels/cpu/reference.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/element.h"

namespace matserve::kernels {
namespace {

// A' (m x k) and B' (k x n) as dense row-major float64.
std::vector<double> dense_a(const GemmProblem& p) {
  std::vector<double> out(static_cast<std::size_t>(p.m * p.k));
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t q = 0; q < p.k; ++q) {
      const std::int64_t idx = p.a_trans ? q * p.lda + i : i * p.lda + q;
      out[static_cast<std::size_t>(i * p.k + q)] = load_element(p.a, p.in_type, idx);
    }
  }
  return out;
}

std::vector<double> dense_b(const GemmProblem& p) {
  std::vector<double> out(static_cast<std::size_t>(p.k * p.n));
  for (std::int64_t q = 0; q < p.k; ++q) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      const std::int64_t idx = p.b_trans ? j * p.ldb + q : q * p.ldb + j;
      out[static_cast<std::size_t>(q * p.n + j)] = load_element(p.b, p.in_type, idx);
    }
  }
  return out;
}

std::vector<double> scaled_c0(const GemmProblem& p, const void* c0) {
  std::vector<double> c(static_cast<std::size_t>(p.m * p.n), 0.0);
  if (p.beta == 0.0 || c0 == nullptr) return c;
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      c[static_cast<std::size_t>(i * p.n + j)] =
          p.beta * load_element(c0, p.out_type, i * p.ldc + j);
    }
  }
  return c;
}

}  // namespace

std::vector<double> reference_gemm(const GemmProblem& p, const void* c0) {
  const std::vector<double> a = dense_a(p);
  const std::vector<double> b = dense_b(p);
  std::vector<double> c = scaled_c0(p, c0);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(p.m),
              static_cast<int>(p.n), static_cast<int>(p.k), p.alpha, a.data(),
              static_cast<int>(p.k), b.data(), static_cast<int>(p.n), 1.0, c.data(),
              static_cast<int>(p.n));
  return c;
}

std::vector<double> reference_gemm_naive(const GemmProblem& p, const void* c0) {
  const std::vector<double> a = dense_a(p);
  const std::vector<double> b = dense_b(p);
  std::vector<double> c = scaled_c0(p, c0);
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      double sum = 0.0;
      for (std::int64_t q = 0; q < p.k; ++q) {
        sum += a[static_cast<std::size_t>(i * p.k + q)] * b[static_cast<std::size_t>(q * p.n + j)];
      }
      c[static_cast<std::size_t>(i * p.n + j)] += p.alpha * sum;
    }
  }
  return c;
}

std::vector<double> reference_transpose(const TransposeProblem& p) {
  std::vector<double> out(static_cast<std::size_t>(p.rows * p.cols));
  for (std::int64_t i = 0; i < p.rows; ++i) {
    for (std::int64_t j = 0; j < p.cols; ++j) {
      out[static_cast<std::size_t>(j * p.rows + i)] =
          p.scale * load_element(p.in, p.dtype, i * p.ld_in + j);
    }
  }
  return out;
}

ErrorStats compare_with_reference(const void* out, DType t, std::int64_t rows, std::int64_t cols,
                                  std::int64_t ld, const std::vector<double>& ref) {
  ErrorStats s;
  double diff2 = 0.0;
  double ref2 = 0.0;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const double v = load_element(out, t, i * ld + j);
      const double r = ref[static_cast<std::size_t>(i * cols + j)];
      if (!std::isfinite(v)) {
        ++s.nonfinite;
        continue;
      }
      const double d = std::fabs(v - r);
      s.max_abs_error = std::max(s.max_abs_error, d);
      diff2 += d * d;
      ref2 += r * r;
    }
  }
  if (s.nonfinite > 0) {
    s.max_abs_error = INFINITY;
    s.rel_l2_error = INFINITY;
    return s;
  }
  s.rel_l2_error = ref2 > 0.0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return s;
}

}  // namespace matserve::kernels
