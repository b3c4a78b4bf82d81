// Per-element accuracy checks for GEMM results, as cuBLAS's and CUTLASS's testbeds bound them:
// |c - ref| <= (rounding of the inputs + k-term accumulation) * sum_k |alpha a b| + |beta c0|
// terms + the output's own rounding + a tiny absolute term, each scaled to the unit roundoff of
// the format involved. A wrong tile or a missing k-term fails it in every precision; the relative
// L2 error over the whole matrix is kept as a reported number only.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/element.h"
#include "kernels/gemm_problem.h"
#include "kernels/types.h"

namespace matserve::testing {

// Unit roundoff (half a step at 1) of a storage format.
inline double unit_roundoff(kernels::DType t) {
  switch (t) {
    case kernels::DType::kF64: return 0x1p-53;
    case kernels::DType::kF32: return 0x1p-24;
    case kernels::DType::kF16: return 0x1p-11;
    case kernels::DType::kBF16: return 0x1p-8;
    case kernels::DType::kF8E4M3: return 0x1p-4;
  }
  return 1.0;
}

// Relative error of rounding one `in`-typed operand to what `p` computes with: none when the data
// is already in that format. tf32 allows a whole step (tensor cores may truncate to it).
inline double input_roundoff(kernels::Precision p, kernels::DType in) {
  switch (p) {
    case kernels::Precision::kF64:
    case kernels::Precision::kF32: return 0.0;
    case kernels::Precision::kTF32: return in == kernels::DType::kF32 ? 0x1p-10 : 0.0;
    case kernels::Precision::kF16: return in == kernels::DType::kF16 ? 0.0 : 0x1p-11;
    case kernels::Precision::kBF16: return in == kernels::DType::kBF16 ? 0.0 : 0x1p-8;
    case kernels::Precision::kF8: return in == kernels::DType::kF8E4M3 ? 0.0 : 0x1p-4;
  }
  return 1.0;
}

// Relative error of one addition into the accumulator: fp64 for fp64, else fp32, with a whole
// step allowed (tensor cores' adders may truncate). Hopper's fp8 tensor cores keep about 14 bits
// of the running sum (DeepSeek-V3's report, and what e4m3 products through cuBLASLt show: errors
// near 2^-12 of the sum with k = 45), not fp32's 24.
inline double accumulator_roundoff(kernels::Precision p) {
  if (p == kernels::Precision::kF8) return 0x1p-13;
  return p == kernels::Precision::kF64 ? 0x1p-52 : 0x1p-23;
}

// An absolute term for values near zero: half the spacing of the output format's subnormals, and
// of fp16 inputs' (k of them).
inline double absolute_floor(kernels::Precision p, kernels::DType out, std::int64_t k) {
  double floor = 0.0;
  if (out == kernels::DType::kF16) floor += 0x1p-25;
  if (out == kernels::DType::kF32 || out == kernels::DType::kBF16) floor += 0x1p-150;
  if (p == kernels::Precision::kF16) floor += static_cast<double>(k) * 0x1p-25;
  return floor;
}

// |alpha| |op(A)| |op(B)| + |beta| |C0| in float64, row-major m x n: the magnitude each element's
// rounding errors scale with. Computed with OpenBLAS dgemm on absolute values (not with the code
// under test, nor the reference's helpers). `c0` may be null when beta == 0.
inline std::vector<double> gemm_magnitude(const kernels::GemmProblem& p, const void* c0) {
  std::vector<double> a(static_cast<std::size_t>(p.m * p.k));
  std::vector<double> b(static_cast<std::size_t>(p.k * p.n));
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t q = 0; q < p.k; ++q) {
      const std::int64_t at = p.a_trans ? q * p.lda + i : i * p.lda + q;
      a[static_cast<std::size_t>(i * p.k + q)] =
          std::fabs(kernels::load_element(p.a, p.in_type, at));
    }
  }
  for (std::int64_t q = 0; q < p.k; ++q) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      const std::int64_t at = p.b_trans ? j * p.ldb + q : q * p.ldb + j;
      b[static_cast<std::size_t>(q * p.n + j)] =
          std::fabs(kernels::load_element(p.b, p.in_type, at));
    }
  }
  std::vector<double> c(static_cast<std::size_t>(p.m * p.n), 0.0);
  if (p.beta != 0.0 && c0 != nullptr) {
    for (std::int64_t i = 0; i < p.m; ++i) {
      for (std::int64_t j = 0; j < p.n; ++j) {
        c[static_cast<std::size_t>(i * p.n + j)] =
            std::fabs(p.beta * kernels::load_element(c0, p.out_type, i * p.ldc + j));
      }
    }
  }
  if (p.k > 0) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(p.m),
                static_cast<int>(p.n), static_cast<int>(p.k), std::fabs(p.alpha), a.data(),
                static_cast<int>(p.k), b.data(), static_cast<int>(p.n), 1.0, c.data(),
                static_cast<int>(p.n));
  }
  return c;
}

struct GemmCheck {
  std::int64_t checked = 0;
  std::int64_t violations = 0;  // elements outside their bound (NaN and Inf included)
  std::int64_t nonfinite = 0;
  double worst_ratio = 0.0;  // the largest |c - ref| / bound
  std::int64_t worst_row = -1, worst_col = -1;
  double worst_got = 0.0, worst_ref = 0.0, worst_bound = 0.0;
  double rel_l2 = 0.0;  // ||c - ref|| / ||ref||: reported, never judged

  bool ok() const { return violations == 0; }
  std::string summary() const {
    std::ostringstream s;
    s << violations << " of " << checked << " elements outside the bound (" << nonfinite
      << " NaN/Inf); worst at (" << worst_row << ", " << worst_col << "): got " << worst_got
      << ", reference " << worst_ref << ", bound " << worst_bound << " (|error| / bound "
      << worst_ratio << "); relative L2 " << rel_l2;
    return s.str();
  }
};

// Checks every element of `out` (p.m x p.n of p.out_type, leading dimension `ld`) against `ref`
// (the exact alpha op(A) op(B) + beta C0 of the data as sent, float64, row-major m x n) within the
// bound above; `magnitude` is gemm_magnitude(p, c0). Large results are checked on every core.
//
// promote_every (fp8 only): the accumulator's partial sum is moved into a full fp32 sum every
// that many terms (0: never), so the reduced-precision roundoff applies to that many additions and
// fp32's to the rest.
inline GemmCheck check_gemm(const kernels::GemmProblem& p, const void* out, std::int64_t ld,
                            const std::vector<double>& ref, const std::vector<double>& magnitude,
                            std::int64_t promote_every = 0) {
  const double u_in = input_roundoff(p.precision, p.in_type);
  const double gamma_in = 2 * u_in + u_in * u_in;  // a product of two rounded operands
  const auto gamma = [](double adds, double u) { return adds * u / (1.0 - adds * u); };
  const double u_acc = accumulator_roundoff(p.precision);
  double gamma_acc = gamma(static_cast<double>(p.k + 2), u_acc);  // k terms, alpha, beta C0
  if (p.precision == kernels::Precision::kF8 && promote_every > 0 && p.k > promote_every) {
    const double blocks = static_cast<double>((p.k + promote_every - 1) / promote_every);
    gamma_acc = gamma(static_cast<double>(promote_every), u_acc) +
                gamma(blocks + 2, accumulator_roundoff(kernels::Precision::kF32));
  }
  const double u_out = unit_roundoff(p.out_type);
  const double floor = absolute_floor(p.precision, p.out_type, p.k);
  struct Part {
    GemmCheck r;
    double diff2 = 0.0, ref2 = 0.0;
  };
  const auto rows = [&](std::int64_t first, std::int64_t last, Part& part) {
    GemmCheck& r = part.r;
    for (std::int64_t i = first; i < last; ++i) {
      for (std::int64_t j = 0; j < p.n; ++j) {
        const auto at = static_cast<std::size_t>(i * p.n + j);
        const double got = kernels::load_element(out, p.out_type, i * ld + j);
        const double want = ref[at];
        const double computed = (gamma_in + gamma_acc * (1 + gamma_in)) * magnitude[at];
        const double bound = computed + u_out * (std::fabs(want) + computed) + floor;
        const double err = std::fabs(got - want);
        ++r.checked;
        const bool finite = std::isfinite(got);
        if (!finite) ++r.nonfinite;
        const double ratio = !finite     ? INFINITY
                             : bound > 0 ? err / bound
                                         : (err > 0 ? INFINITY : 0);
        if (!finite || err > bound) ++r.violations;
        if (ratio > r.worst_ratio || r.worst_row < 0) {
          r.worst_ratio = ratio;
          r.worst_row = i, r.worst_col = j;
          r.worst_got = got, r.worst_ref = want, r.worst_bound = bound;
        }
        if (finite) part.diff2 += err * err;
        part.ref2 += want * want;
      }
    }
  };
  const std::int64_t threads = p.m * p.n < (1 << 20)
                                   ? 1
                                   : std::clamp<std::int64_t>(std::thread::hardware_concurrency(),
                                                              1, std::max<std::int64_t>(p.m, 1));
  std::vector<Part> parts(static_cast<std::size_t>(threads));
  std::vector<std::thread> workers;
  const std::int64_t per = (p.m + threads - 1) / threads;
  for (std::int64_t t = 0; t < threads; ++t) {
    const std::int64_t first = std::min(p.m, t * per), last = std::min(p.m, (t + 1) * per);
    workers.emplace_back(rows, first, last, std::ref(parts[static_cast<std::size_t>(t)]));
  }
  for (std::thread& w : workers) w.join();
  GemmCheck r;
  double diff2 = 0.0, ref2 = 0.0;
  for (const Part& part : parts) {
    r.checked += part.r.checked;
    r.violations += part.r.violations;
    r.nonfinite += part.r.nonfinite;
    if (part.r.worst_row >= 0 && (part.r.worst_ratio > r.worst_ratio || r.worst_row < 0)) {
      r.worst_ratio = part.r.worst_ratio;
      r.worst_row = part.r.worst_row, r.worst_col = part.r.worst_col;
      r.worst_got = part.r.worst_got, r.worst_ref = part.r.worst_ref;
      r.worst_bound = part.r.worst_bound;
    }
    diff2 += part.diff2;
    ref2 += part.ref2;
  }
  r.rel_l2 = r.nonfinite > 0 ? INFINITY : ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return r;
}

}  // namespace matserve::testing
