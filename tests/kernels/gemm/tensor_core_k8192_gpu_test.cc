// Tensor-core variants (WMMA, mma.sync, wgmma, cuBLASLt) with a deep K = 8192, which the generic
// harness lacks: fp16/bf16 operands with fp32 accumulation must stay under 1e-2 relative L2
// against float64, all four transpose states, odd and tile-multiple M/N, output poisoned first.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/reference.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"
#include "tests/support/gemm_bound.h"
#include "tests/support/gpu_gemm_setup.h"
#include "tests/support/random_matrix.h"

namespace matserve::kernels {
namespace {

struct DeepCase {
  std::int64_t m, n;
  bool trans_a, trans_b;
};

class TensorCoreDeepK : public ::testing::TestWithParam<DeepCase> {};

TEST_P(TensorCoreDeepK, MatchesFloat64Reference) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
  auto res = StreamResources::create();
  ASSERT_TRUE(res.ok()) << res.status();
  const DeepCase& c = GetParam();
  constexpr std::int64_t k = 8192;
  int checked = 0;
  std::uint64_t seed = 77;
  for (const GemmVariant& v : gemm_variants()) {
    if (v.backend != Backend::kCuda) continue;
    if (v.family != "tensor_core" && v.name != "cublaslt") continue;
    for (Precision prec : {Precision::kF16, Precision::kBF16, Precision::kTF32}) {
      if (!v.supports(prec)) continue;
      const DType in = prec == Precision::kF16    ? DType::kF16
                       : prec == Precision::kBF16 ? DType::kBF16
                                                  : DType::kF32;
      // fp32 output, and for 16-bit data also 16-bit output (the TMA-store epilogue's case).
      for (DType out_type : {DType::kF32, in}) {
        if (out_type == in && in == DType::kF32) continue;
        auto a = testing::random_matrix(c.m * k, in, seed++);
        auto b = testing::random_matrix(k * c.n, in, seed++);
        std::vector<std::byte> c0(static_cast<std::size_t>(c.m * c.n) * dtype_size(out_type));
        testing::poison(c0.data(), c0.size());
        auto da = testing::to_device(a);
        auto db = testing::to_device(b);
        auto dc = testing::to_device(c0);
        ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
        GemmProblem p = testing::dense_problem(c.m, c.n, k, c.trans_a, c.trans_b, in, out_type,
                                               prec, /*alpha=*/1.0, /*beta=*/0.0);
        GemmProblem host = p;
        host.a = a.data();
        host.b = b.data();
        const std::vector<double> ref = reference_gemm(host, nullptr);
        const std::vector<double> magnitude = testing::gemm_magnitude(host, nullptr);
        p.a = da->data();
        p.b = db->data();
        p.c = dc->data();
        const std::string what = std::string(v.name) + " " + std::string(precision_name(prec)) +
                                 " out=" + std::string(dtype_name(out_type));
        if (absl::Status s = check_gemm_variant(v, p); !s.ok()) {
          EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << what << ": " << s;
          continue;
        }
        ASSERT_TRUE(v.launch(p, res->context()).ok()) << what;
        ASSERT_EQ(cudaStreamSynchronize(res->stream()), cudaSuccess) << what;
        std::vector<std::byte> out(c0.size());
        ASSERT_EQ(cudaMemcpy(out.data(), dc->data(), out.size(), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        const testing::GemmCheck e = testing::check_gemm(host, out.data(), c.n, ref, magnitude);
        EXPECT_TRUE(e.ok()) << what << ": " << e.summary();
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no tensor-core variant could run this case";
}

std::vector<DeepCase> deep_cases() {
  std::vector<DeepCase> out;
  for (auto [m, n] : {std::pair<std::int64_t, std::int64_t>{256, 256}, {136, 264}}) {
    for (int t = 0; t < 4; ++t) out.push_back({m, n, (t & 1) != 0, (t & 2) != 0});
  }
  return out;
}

std::string deep_name(const ::testing::TestParamInfo<DeepCase>& info) {
  const DeepCase& c = info.param;
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x8192_" + (c.trans_a ? "T" : "N") +
         (c.trans_b ? "T" : "N");
}

INSTANTIATE_TEST_SUITE_P(DeepK, TensorCoreDeepK, ::testing::ValuesIn(deep_cases()), deep_name);

}  // namespace
}  // namespace matserve::kernels
