// Every CUDA GEMM variant in the registry, for every precision it claims, against the float64
// reference: odd shapes (1, primes, non-multiples of any tile, thin, tall, wide), all four
// transpose states, alpha/beta, output poisoned first. Skips (visibly) without a GPU.
//
// MATSERVE_TEST_VARIANTS=a,b limits the variants; MATSERVE_TEST_QUICK=1 drops the 2048^3 case.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/reference.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"
#include "tests/support/precision_cases.h"
#include "tests/support/random_matrix.h"
#include "tests/support/variant_filter.h"

namespace matserve::kernels {
namespace {

using testing::data_type;
using testing::tolerance;

struct Shape {
  std::int64_t m, n, k;
};

struct Case {
  Shape shape;
  bool trans_a;
  bool trans_b;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.shape.m << "x" << c.shape.n << "x" << c.shape.k << (c.trans_a ? " A^T" : "")
      << (c.trans_b ? " B^T" : "");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::ostringstream s;
  s << c.shape.m << "x" << c.shape.n << "x" << c.shape.k << "_" << (c.trans_a ? "T" : "N")
    << (c.trans_b ? "T" : "N");
  return s.str();
}

std::vector<Case> all_cases() {
  std::vector<Shape> shapes = {
      {1, 1, 1},    {7, 5, 3},        {61, 17, 131},    {17, 9, 33},      {1000, 1, 1000},
      {1, 4096, 1}, {4095, 4097, 33}, {4095, 4097, 61}, {129, 257, 4099}, {2048, 2048, 2048}};
  std::vector<Case> out;
  for (const Shape& s : shapes) {
    for (int t = 0; t < 4; ++t) out.push_back({s, (t & 1) != 0, (t & 2) != 0});
  }
  return out;
}

class GemmVariantsGpu : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
    const Shape& s = GetParam().shape;
    if (s.m * s.n * s.k > 1'000'000'000 && std::getenv("MATSERVE_TEST_QUICK") != nullptr) {
      GTEST_SKIP() << "MATSERVE_TEST_QUICK set: large shape skipped";
    }
    auto r = StreamResources::create();
    ASSERT_TRUE(r.ok()) << r.status();
    resources_ = std::make_unique<StreamResources>(*std::move(r));
  }

  // Runs `v` on one (precision, output type) and checks it against the float64 reference.
  void check(const GemmVariant& v, Precision prec, DType out_type, double alpha, double beta,
             std::uint64_t seed) {
    const Case& c = GetParam();
    const DType in_type = data_type(prec);
    const Shape& s = c.shape;
    // Stored operands: op(A) is m x k, so A is stored k x m when transposed (row-major).
    const std::int64_t a_count = s.m * s.k;
    const std::int64_t b_count = s.k * s.n;
    const std::int64_t c_count = s.m * s.n;
    auto a = testing::random_matrix(a_count, in_type, seed);
    auto b = testing::random_matrix(b_count, in_type, seed + 1);
    std::vector<std::byte> c0 = testing::random_matrix(c_count, out_type, seed + 2);
    if (beta == 0.0) testing::poison(c0.data(), c0.size());

    auto da = allocate_device(a.size());
    auto db = allocate_device(b.size());
    auto dc = allocate_device(c0.size());
    ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
    ASSERT_EQ(cudaMemcpy(da->data(), a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(db->data(), b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dc->data(), c0.data(), c0.size(), cudaMemcpyHostToDevice), cudaSuccess);
    // A pageable cudaMemcpy may return before its DMA lands, and the kernel's non-blocking stream
    // does not wait for the legacy stream: finish the copies first.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    GemmProblem p;
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.a_trans = c.trans_a;
    p.lda = c.trans_a ? s.m : s.k;
    p.b_trans = c.trans_b;
    p.ldb = c.trans_b ? s.k : s.n;
    p.ldc = s.n;
    p.in_type = in_type;
    p.out_type = out_type;
    p.precision = prec;
    p.alpha = alpha;
    p.beta = beta;
    const std::string what = std::string(v.name) + " " + std::string(precision_name(prec)) +
                             " out=" + std::string(dtype_name(out_type)) +
                             " beta=" + std::to_string(beta);

    // Host-side reference on the host copies.
    GemmProblem host = p;
    host.a = a.data();
    host.b = b.data();
    const std::vector<double> ref = reference_gemm(host, c0.data());

    p.a = da->data();
    p.b = db->data();
    p.c = dc->data();
    if (absl::Status s2 = check_gemm_variant(v, p); !s2.ok()) {
      EXPECT_EQ(s2.code(), absl::StatusCode::kFailedPrecondition) << what << ": " << s2;
      return;  // a declared constraint, reported through the registry
    }
    absl::Status st = v.launch(p, resources_->context());
    ASSERT_TRUE(st.ok()) << what << ": " << st;
    ASSERT_EQ(cudaStreamSynchronize(resources_->stream()), cudaSuccess) << what;
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << what;

    std::vector<std::byte> out(c0.size());
    ASSERT_EQ(cudaMemcpy(out.data(), dc->data(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    const ErrorStats e = compare_with_reference(out.data(), out_type, s.m, s.n, s.n, ref);
    // Rounding the output to 16 bits adds up to 2^-9 (fp16) or 2^-8 (bf16) relative error.
    EXPECT_EQ(e.nonfinite, 0) << what << ": NaN/Inf in the output (unwritten or overflow)";
    EXPECT_LT(e.rel_l2_error, tolerance(prec)) << what << " max_abs=" << e.max_abs_error;
  }

  std::unique_ptr<StreamResources> resources_;
};

TEST_P(GemmVariantsGpu, MatchesFloat64Reference) {
  int checked = 0;
  std::uint64_t seed = 1234;
  for (const GemmVariant& v : gemm_variants()) {
    if (v.backend != Backend::kCuda || !testing::variant_selected(v.name)) continue;
    for (Precision prec : kEveryPrecision) {
      // fp8 has its own scaled-reference test (tensor_core_fp8_gpu_test).
      if (prec == Precision::kF8 || !v.supports(prec)) continue;
      const DType data = data_type(prec);
      // Plain C = A*B with a poisoned C, then alpha/beta with a random C.
      check(v, prec, data, 1.0, 0.0, seed++);
      check(v, prec, data, 0.5, 2.0, seed++);
      if (data == DType::kF16 || data == DType::kBF16)
        check(v, prec, DType::kF32, 0.5, 2.0, seed++);
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no CUDA GEMM variant selected";
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmVariantsGpu, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace matserve::kernels
