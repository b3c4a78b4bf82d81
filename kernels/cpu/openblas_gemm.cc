// CPU GEMM through OpenBLAS: see openblas_gemm.h.
#include "kernels/cpu/openblas_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/element.h"
#include "kernels/half.h"

namespace matserve::kernels {
namespace {

CBLAS_TRANSPOSE trans(bool t) {
  return t ? CblasTrans : CblasNoTrans;
}

// The elements of a stored operand (`count` of them, leading-dimension layout unchanged) as fp32,
// rounded to the precision the request computes in. fp8 of wider data is quantized as the GPU
// does it: one scale per tensor (448 / amax), e4m3 rounding, then the scale undone; e4m3 data is
// taken as it is. `dequant_scale`, when not null, receives the scale a quantized operand's e4m3
// values are multiplied by to mean the data (amax / 448; 1 when amax is 0).
std::vector<float> operand_as_f32(const void* data, DType t, std::int64_t count, Precision p,
                                  float* dequant_scale = nullptr) {
  std::vector<float> out(static_cast<std::size_t>(count));
  float amax = 0.0f;
  for (std::int64_t i = 0; i < count; ++i) {
    float v = static_cast<float>(load_element(data, t, i));
    if (p == Precision::kTF32) v = round_to_tf32(v);
    if (p == Precision::kF16) v = half_to_float(float_to_half(v));
    if (p == Precision::kBF16) v = bf16_to_float(float_to_bf16(v));
    amax = std::max(amax, std::fabs(v));
    out[static_cast<std::size_t>(i)] = v;
  }
  if (p == Precision::kF8 && t != DType::kF8E4M3 && amax > 0.0f) {
    const float scale = 448.0f / amax;
    for (float& v : out) v = e4m3_to_float(float_to_e4m3(v * scale)) / scale;
  }
  if (dequant_scale != nullptr) *dequant_scale = amax > 0.0f ? amax / 448.0f : 1.0f;
  return out;
}

// Elements a stored operand spans: the last element's index + 1.
std::int64_t span(std::int64_t rows_stored, std::int64_t ld, std::int64_t cols_stored) {
  return (rows_stored - 1) * ld + cols_stored;
}

}  // namespace

int set_openblas_threads(int threads) {
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && std::getenv("OMP_NUM_THREADS") == nullptr) {
    openblas_set_num_threads(std::max(1, threads));
  }
  return openblas_get_num_threads();
}

namespace {

absl::Status one_product(const GemmProblem& p) {
  const int m = static_cast<int>(p.m);
  const int n = static_cast<int>(p.n);
  const int k = static_cast<int>(p.k);
  const int lda = static_cast<int>(p.lda);
  const int ldb = static_cast<int>(p.ldb);
  const int ldc = static_cast<int>(p.ldc);
  if (p.precision == Precision::kF64) {
    cblas_dgemm(CblasRowMajor, trans(p.a_trans), trans(p.b_trans), m, n, k, p.alpha,
                static_cast<const double*>(p.a), lda, static_cast<const double*>(p.b), ldb, p.beta,
                static_cast<double*>(p.c), ldc);
    return absl::OkStatus();
  }
  if (p.precision == Precision::kF32 && p.in_type == DType::kF32 && p.out_type == DType::kF32) {
    cblas_sgemm(CblasRowMajor, trans(p.a_trans), trans(p.b_trans), m, n, k,
                static_cast<float>(p.alpha), static_cast<const float*>(p.a), lda,
                static_cast<const float*>(p.b), ldb, static_cast<float>(p.beta),
                static_cast<float*>(p.c), ldc);
    return absl::OkStatus();
  }
  // Reduced precisions and 16-bit data: fp32 copies, fp32 accumulation, then the output type.
  const std::int64_t a_span = p.a_trans ? span(p.k, p.lda, p.m) : span(p.m, p.lda, p.k);
  const std::int64_t b_span = p.b_trans ? span(p.n, p.ldb, p.k) : span(p.k, p.ldb, p.n);
  // fp8 of wider data: the dequant scales go where the problem says (as the GPU variants do).
  const bool scales = p.fp8_scales_out != nullptr && quantizes_to_fp8(p);
  const std::vector<float> a =
      operand_as_f32(p.a, p.in_type, a_span, p.precision, scales ? p.fp8_scales_out : nullptr);
  const std::vector<float> b =
      operand_as_f32(p.b, p.in_type, b_span, p.precision, scales ? p.fp8_scales_out + 1 : nullptr);
  const std::int64_t c_span = span(p.m, p.ldc, p.n);
  std::vector<float> c(static_cast<std::size_t>(c_span), 0.0f);
  if (p.beta != 0.0) {
    for (std::int64_t i = 0; i < c_span; ++i) {
      c[static_cast<std::size_t>(i)] = static_cast<float>(load_element(p.c, p.out_type, i));
    }
  }
  cblas_sgemm(CblasRowMajor, trans(p.a_trans), trans(p.b_trans), m, n, k,
              static_cast<float>(p.alpha), a.data(), lda, b.data(), ldb, static_cast<float>(p.beta),
              c.data(), ldc);
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      store_element(p.c, p.out_type, i * p.ldc + j, c[static_cast<std::size_t>(i * p.ldc + j)]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

// A batch is its products one after another (host pointers and pointer arrays).
absl::Status openblas_gemm(const GemmProblem& p, const ExecContext& /*ctx*/) {
  if (p.batch.count == 1) return one_product(p);
  for (std::int64_t z = 0; z < p.batch.count; ++z) {
    if (absl::Status s = one_product(host_product(p, z)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace matserve::kernels
