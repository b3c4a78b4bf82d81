// The fp8 (e4m3) GEMM variants (cuBLASLt's and the wgmma kernel, each with promoted and fast
// accumulation) against the float64 reference of the data as given: fp32, fp16 and bf16 data
// quantized on the device (per-tensor amax scales), e4m3 data taken as is; odd, thin, tall and
// deep shapes, all four operand orders, alpha/beta, output poisoned. Each element is checked
// within gemm_bound.h's fp8 bound: the promoted variants' partial sums are taken as promoted to
// fp32 every 128 terms; the fast variants keep the tensor cores' sum over all of k, whose bound
// says nothing past k ~ 4000, so deeper products of theirs are held to a relative L2 error instead.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu/reference.h"
#include "kernels/cublaslt/fp8_operands.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"
#include "tests/support/gemm_bound.h"
#include "tests/support/gpu_gemm_setup.h"
#include "tests/support/random_matrix.h"

namespace matserve::kernels {
namespace {

struct Fp8Case {
  std::int64_t m, n, k;
  bool trans_a, trans_b;
};

struct Fp8Variant {
  const char* name;
  bool promoted;     // partial sums promoted to fp32 every 128 of k
  bool writes_fp16;  // takes an fp16 output
};

constexpr Fp8Variant kVariants[] = {{"cublaslt_fp8", true, false},
                                    {"cublaslt_fp8_fast", false, false},
                                    {"wgmma_fp8", true, true},
                                    {"wgmma_fp8_fast", false, true}};

// Deepest k at which the fast variants' per-element bound still bounds something.
constexpr std::int64_t kFastBoundedK = 4000;

class Fp8Gemm : public ::testing::TestWithParam<Fp8Case> {
 protected:
  // One (data type, output type, alpha, beta) on the case's shape: the reference once, then every
  // variant that takes the output type.
  void run(DType in, DType out, double alpha, double beta, std::uint64_t seed) {
    const Fp8Case& c = GetParam();
    auto res = StreamResources::create();
    ASSERT_TRUE(res.ok()) << res.status();
    auto a = testing::random_matrix(c.m * c.k, in, seed);
    auto b = testing::random_matrix(c.k * c.n, in, seed + 1);
    std::vector<std::byte> c0 = testing::random_matrix(c.m * c.n, out, seed + 2);
    auto da = testing::to_device(a);
    auto db = testing::to_device(b);
    ASSERT_TRUE(da.ok() && db.ok());
    GemmProblem p = testing::dense_problem(c.m, c.n, c.k, c.trans_a, c.trans_b, in, out,
                                           Precision::kF8, alpha, beta);
    GemmProblem host = p;
    host.a = a.data();
    host.b = b.data();
    const std::vector<double> ref = reference_gemm(host, c0.data());
    const std::vector<double> magnitude = testing::gemm_magnitude(host, c0.data());
    for (const Fp8Variant& fv : kVariants) {
      if (out == DType::kF16 && !fv.writes_fp16) continue;
      const GemmVariant* v = find_gemm_variant(fv.name);
      ASSERT_NE(v, nullptr) << fv.name;
      std::vector<std::byte> start = c0;
      if (beta == 0.0) testing::poison(start.data(), start.size());
      auto dc = testing::to_device(start);
      ASSERT_TRUE(dc.ok());
      GemmProblem q = p;
      q.a = da->data();
      q.b = db->data();
      q.c = dc->data();
      const std::string what = std::string(fv.name) + " " + std::string(dtype_name(in)) + " -> " +
                               std::string(dtype_name(out)) + " beta=" + std::to_string(beta);
      // Every operand order and shape is taken: what is not K-major e4m3 is made so first.
      const absl::Status can = check_gemm_variant(*v, q);
      ASSERT_TRUE(can.ok()) << what << ": " << can;
      const absl::Status st = v->launch(q, res->context());
      ASSERT_TRUE(st.ok()) << what << ": " << st;
      ASSERT_EQ(cudaStreamSynchronize(res->stream()), cudaSuccess) << what;
      std::vector<std::byte> got(start.size());
      ASSERT_EQ(cudaMemcpy(got.data(), dc->data(), got.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      const testing::GemmCheck e =
          testing::check_gemm(host, got.data(), c.n, ref, magnitude, fv.promoted ? 128 : 0);
      if (fv.promoted || c.k <= kFastBoundedK) {
        EXPECT_TRUE(e.ok()) << what << ": " << e.summary();
      } else {
        EXPECT_EQ(e.nonfinite, 0) << what;
        EXPECT_LT(e.rel_l2, 6e-2) << what << ": " << e.summary();
      }
      if (::testing::Test::HasFailure() || c.k >= 4093) {
        std::printf("%s %lldx%lldx%lld %c%c: worst |error|/bound %.3g, relative L2 %.3e\n",
                    what.c_str(), static_cast<long long>(c.m), static_cast<long long>(c.n),
                    static_cast<long long>(c.k), c.trans_a ? 'T' : 'N', c.trans_b ? 'T' : 'N',
                    e.worst_ratio, e.rel_l2);
      }
    }
  }
};

TEST_P(Fp8Gemm, QuantizedFromWiderData) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
  run(DType::kBF16, DType::kBF16, 1.0, 0.0, 11);
  run(DType::kF32, DType::kF32, 0.5, 2.0, 21);
  run(DType::kF16, DType::kBF16, 0.5, 2.0, 31);
}

// K-major (NT) e4m3 data is read as given; the other orders, and rows that are not 16-byte
// multiples, are repacked first: every case here must match the reference.
TEST_P(Fp8Gemm, E4m3DataInEveryOrder) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
  run(DType::kF8E4M3, DType::kBF16, 1.0, 0.0, 41);
  run(DType::kF8E4M3, DType::kF32, 0.5, 2.0, 51);
  run(DType::kF8E4M3, DType::kF16, 1.0, 0.0, 61);
}

std::vector<Fp8Case> fp8_cases() {
  const std::vector<std::vector<std::int64_t>> shapes = {
      {1, 1, 1},        {17, 9, 33},        {1000, 1, 1000},  {1, 4096, 16},
      {4095, 4097, 61}, {129, 257, 4099},   {256, 256, 8192}, {1000, 999, 1001},
      {64, 8192, 64},   {4095, 4097, 4093}, {300, 1000, 128}};
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

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8Gemm, ::testing::ValuesIn(fp8_cases()), fp8_name);

// Needs no GPU: the fp8 variants' batch loop hands each product its own pointers, from the strides
// of a stacked batch or from the host's copy of a batch of separate matrices' pointer arrays.
TEST(Fp8BatchLoop, EachProductGetsItsOwnPointers) {
  std::vector<unsigned char> a(1000), b(1000);
  std::vector<float> c(1000);
  GemmProblem p;
  p.m = p.n = p.k = 4;
  p.in_type = DType::kF8E4M3;
  p.out_type = DType::kF32;
  p.a = a.data();
  p.b = b.data();
  p.c = c.data();
  p.batch.count = 3;
  p.batch.stride_a = 16;
  p.batch.stride_b = 0;  // broadcast
  p.batch.stride_c = 20;
  std::vector<std::vector<const void*>> seen;
  const auto record = [&seen](const GemmProblem& one) {
    EXPECT_EQ(one.batch.count, 1);
    seen.push_back({one.a, one.b, one.c});
    return absl::OkStatus();
  };
  ASSERT_TRUE(for_each_product(p, record).ok());
  ASSERT_EQ(seen.size(), 3u);
  for (int z = 0; z < 3; ++z) {
    EXPECT_EQ(seen[z][0], a.data() + 16 * z) << z;
    EXPECT_EQ(seen[z][1], b.data()) << z;
    EXPECT_EQ(seen[z][2], c.data() + 20 * z) << z;
  }
  // Separate matrices: the device arrays are not read on the host; their host copy is.
  const std::vector<const void*> host = {a.data() + 900, a.data() + 3,  a.data() + 500,
                                         b.data() + 7,   b.data() + 70, b.data(),
                                         c.data() + 1,   c.data() + 99, c.data() + 50};
  const std::vector<const void*> device(9, nullptr);
  p.batch = GemmBatch{};
  p.batch.count = 3;
  p.batch.a_array = device.data();
  p.batch.b_array = device.data() + 3;
  p.batch.c_array = const_cast<void* const*>(device.data() + 6);
  EXPECT_FALSE(fp8_operands_refusal("wgmma_fp8", p).ok());  // no host copy: refused
  p.batch.host_a_array = host.data();
  p.batch.host_b_array = host.data() + 3;
  p.batch.host_c_array = const_cast<void* const*>(host.data() + 6);
  seen.clear();
  ASSERT_TRUE(for_each_product(p, record).ok());
  ASSERT_EQ(seen.size(), 3u);
  for (int z = 0; z < 3; ++z) {
    EXPECT_EQ(seen[z][0], host[z]) << z;
    EXPECT_EQ(seen[z][1], host[3 + z]) << z;
    EXPECT_EQ(seen[z][2], host[6 + z]) << z;
  }
}

}  // namespace
}  // namespace matserve::kernels
