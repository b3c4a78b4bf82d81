// The cuBLASLt fp8 (e4m3) variant against the float64 reference of the data as given: fp32, fp16
// and bf16 data quantized on the device (per-tensor amax scales), e4m3 data taken as is; odd, thin
// and tall shapes, all four transpose states, alpha/beta, output poisoned; relative L2 < 6e-2.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu/reference.h"
#include "kernels/cublaslt/cublaslt_fp8.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"
#include "tests/support/gpu_gemm_setup.h"
#include "tests/support/random_matrix.h"

namespace matserve::kernels {
namespace {

struct Fp8Case {
  std::int64_t m, n, k;
  bool trans_a, trans_b;
};

class CublasLtFp8 : public ::testing::TestWithParam<Fp8Case> {
 protected:
  void run(DType in, DType out, double alpha, double beta, std::uint64_t seed) {
    const Fp8Case& c = GetParam();
    const GemmVariant* v = find_gemm_variant("cublaslt_fp8");
    ASSERT_NE(v, nullptr);
    auto res = StreamResources::create();
    ASSERT_TRUE(res.ok()) << res.status();
    auto a = testing::random_matrix(c.m * c.k, in, seed);
    auto b = testing::random_matrix(c.k * c.n, in, seed + 1);
    std::vector<std::byte> c0 = testing::random_matrix(c.m * c.n, out, seed + 2);
    if (beta == 0.0) testing::poison(c0.data(), c0.size());
    auto da = testing::to_device(a);
    auto db = testing::to_device(b);
    auto dc = testing::to_device(c0);
    ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
    GemmProblem p = testing::dense_problem(c.m, c.n, c.k, c.trans_a, c.trans_b, in, out,
                                           Precision::kF8, alpha, beta);
    GemmProblem host = p;
    host.a = a.data();
    host.b = b.data();
    const std::vector<double> ref = reference_gemm(host, c0.data());
    p.a = da->data();
    p.b = db->data();
    p.c = dc->data();
    const std::string what = std::string(dtype_name(in)) + " -> " + std::string(dtype_name(out)) +
                             " beta=" + std::to_string(beta);
    // Every operand order and shape is taken: e4m3 data that is not K-major is repacked.
    ASSERT_TRUE(check_gemm_variant(*v, p).ok()) << what << ": " << check_gemm_variant(*v, p);
    absl::Status st = v->launch(p, res->context());
    ASSERT_TRUE(st.ok()) << what << ": " << st;
    ASSERT_EQ(cudaStreamSynchronize(res->stream()), cudaSuccess) << what;
    std::vector<std::byte> got(c0.size());
    ASSERT_EQ(cudaMemcpy(got.data(), dc->data(), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    const ErrorStats e = compare_with_reference(got.data(), out, c.m, c.n, c.n, ref);
    EXPECT_EQ(e.nonfinite, 0) << what;
    EXPECT_LT(e.rel_l2_error, 6e-2) << what << " max_abs=" << e.max_abs_error;
    if (::testing::Test::HasFailure() || c.k == 8192) {
      std::printf("fp8 %s %lldx%lldx%lld: rel_l2=%.3e (%s)\n", what.c_str(), (long long)c.m,
                  (long long)c.n, (long long)c.k, e.rel_l2_error, cublaslt_fp8_scale_mode());
    }
  }
};

TEST_P(CublasLtFp8, QuantizedFromWiderData) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
  run(DType::kBF16, DType::kBF16, 1.0, 0.0, 11);
  run(DType::kF32, DType::kF32, 0.5, 2.0, 21);
  run(DType::kF16, DType::kBF16, 0.5, 2.0, 31);
}

// K-major (NT) e4m3 data goes to cuBLASLt as given; the other orders, and rows that are not
// 16-byte multiples, are repacked first: every case here must match the reference.
TEST_P(CublasLtFp8, E4m3DataInEveryOrder) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
  run(DType::kF8E4M3, DType::kBF16, 1.0, 0.0, 41);
  run(DType::kF8E4M3, DType::kF32, 0.5, 2.0, 51);
}

std::vector<Fp8Case> fp8_cases() {
  const std::vector<std::vector<std::int64_t>> shapes = {
      {1, 1, 1},        {17, 9, 33},      {1000, 1, 1000}, {1, 4096, 16},
      {4095, 4097, 61}, {129, 257, 4099}, {256, 256, 8192}};
  std::vector<Fp8Case> out;
  for (const auto& s : shapes) {
    for (int t = 0; t < 4; ++t) out.push_back({s[0], s[1], s[2], (t & 1) != 0, (t & 2) != 0});
  }
  return out;
}

std::string fp8_name(const ::testing::TestParamInfo<Fp8Case>& info) {
  const Fp8Case& c = info.param;
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + "_" +
         (c.trans_a ? "T" : "N") + (c.trans_b ? "T" : "N");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CublasLtFp8, ::testing::ValuesIn(fp8_cases()), fp8_name);

}  // namespace
}  // namespace matserve::kernels
