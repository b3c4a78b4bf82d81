// Every CUDA GEMM variant in the registry, for every precision it claims, against the float64
// reference, each element within its precision's bound (gemm_bound.h): odd shapes (1, primes,
// non-multiples of any tile, thin, tall, wide), all four transpose states, alpha/beta, output
// poisoned first. A case a variant refuses passes only as a constraint its registry entry
// declares. Each reference is computed once per problem. Skips (visibly) without a GPU.
//
// MATSERVE_TEST_VARIANTS=a,b limits the variants; MATSERVE_TEST_QUICK=1 drops the 2048^3 case.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/reference.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"
#include "tests/support/gemm_bound.h"
#include "tests/support/gpu_gemm_setup.h"
#include "tests/support/precision_cases.h"
#include "tests/support/random_matrix.h"
#include "tests/support/variant_filter.h"

namespace matserve::kernels {
namespace {

using testing::data_type;

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

// The inputs and float64 reference of one (data type, output type, alpha, beta) on a case's
// shape: made once per problem and shared by every variant and every precision that reads the
// same inputs (fp32 and tf32 both read fp32 data). The reference is OpenBLAS's dgemm (on every
// core); the magnitudes the error bound scales with are made the same way (gemm_bound.h).
struct Reference {
  std::vector<std::byte> a, b, c0;
  std::vector<double> ref, magnitude;
};

// What check() did with one (variant, precision, output type).
enum class Ran { kChecked, kRefused };

class GemmVariantsGpu : public testing::WithGpuStream<::testing::TestWithParam<Case>> {
 protected:
  void SetUp() override {
    const Shape& s = GetParam().shape;
    if (s.m * s.n * s.k > 1'000'000'000 && std::getenv("MATSERVE_TEST_QUICK") != nullptr) {
      GTEST_SKIP() << "MATSERVE_TEST_QUICK set: large shape skipped";
    }
    WithGpuStream::SetUp();
  }

  // The problem of this case (no pointers set).
  GemmProblem problem(Precision prec, DType in_type, DType out_type, double alpha,
                      double beta) const {
    const Case& c = GetParam();
    return testing::dense_problem(c.shape.m, c.shape.n, c.shape.k, c.trans_a, c.trans_b, in_type,
                                  out_type, prec, alpha, beta);
  }

  const Reference& reference(DType in_type, DType out_type, double alpha, double beta) {
    const auto key =
        std::make_tuple(static_cast<int>(in_type), static_cast<int>(out_type), alpha, beta);
    std::unique_ptr<Reference>& slot = references_[key];
    if (slot != nullptr) return *slot;
    slot = std::make_unique<Reference>();
    const Shape& s = GetParam().shape;
    const std::uint64_t seed = 1234 + 16 * static_cast<std::uint64_t>(in_type) +
                               4 * static_cast<std::uint64_t>(out_type) + (beta == 0.0 ? 0 : 2);
    slot->a = testing::random_matrix(s.m * s.k, in_type, seed);
    slot->b = testing::random_matrix(s.k * s.n, in_type, seed + 100);
    if (beta == 0.0) {
      slot->c0.resize(static_cast<std::size_t>(s.m * s.n) * dtype_size(out_type));
      testing::poison(slot->c0.data(), slot->c0.size());
    } else {
      slot->c0 = testing::random_matrix(s.m * s.n, out_type, seed + 200);
    }
    GemmProblem host = problem(Precision::kF64, in_type, out_type, alpha, beta);
    host.a = slot->a.data();
    host.b = slot->b.data();
    slot->ref = reference_gemm(host, slot->c0.data());
    slot->magnitude = testing::gemm_magnitude(host, slot->c0.data());
    return *slot;
  }

  // Runs `v` on one (precision, output type) and checks every element against the float64
  // reference within the precision's bound. kRefused when the registry's check refuses the case
  // with FAILED_PRECONDITION and the variant declares constraints; any other refusal fails.
  Ran check(const GemmVariant& v, Precision prec, DType out_type, double alpha, double beta) {
    const DType in_type = data_type(prec);
    const Reference& r = reference(in_type, out_type, alpha, beta);
    GemmProblem p = problem(prec, in_type, out_type, alpha, beta);
    const std::string what = std::string(v.name) + " " + std::string(precision_name(prec)) +
                             " out=" + std::string(dtype_name(out_type)) +
                             " beta=" + std::to_string(beta);
    if (absl::Status refused = check_gemm_variant(v, p); !refused.ok()) {
      EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << what << ": " << refused;
      EXPECT_FALSE(v.constraints.empty())
          << what
          << " refused a case although its registry entry declares no constraint: " << refused;
      return Ran::kRefused;
    }
    auto da = testing::to_device(r.a);
    auto db = testing::to_device(r.b);
    auto dc = testing::to_device(r.c0);
    EXPECT_TRUE(da.ok() && db.ok() && dc.ok()) << what;
    if (!da.ok() || !db.ok() || !dc.ok()) return Ran::kChecked;
    p.a = da->data();
    p.b = db->data();
    p.c = dc->data();
    const absl::Status st = v.launch(p, resources_->context());
    EXPECT_TRUE(st.ok()) << what << ": " << st;
    EXPECT_EQ(cudaStreamSynchronize(resources_->stream()), cudaSuccess) << what;
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
    std::vector<std::byte> out(r.c0.size());
    EXPECT_EQ(cudaMemcpy(out.data(), dc->data(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    p.a = r.a.data();
    p.b = r.b.data();
    const testing::GemmCheck e = testing::check_gemm(p, out.data(), p.n, r.ref, r.magnitude);
    EXPECT_TRUE(e.ok()) << what << ": " << e.summary();
    return Ran::kChecked;
  }

  std::map<std::tuple<int, int, double, double>, std::unique_ptr<Reference>> references_;
};

TEST_P(GemmVariantsGpu, MatchesFloat64Reference) {
  int selected = 0;
  int ran = 0;
  std::vector<std::string> refused;
  for (const GemmVariant& v : gemm_variants()) {
    if (v.backend != Backend::kCuda || !testing::variant_selected(v.name)) continue;
    ++selected;
    for (Precision prec : kEveryPrecision) {
      // fp8 has its own scaled-reference test (tensor_core_fp8_gpu_test).
      if (prec == Precision::kF8 || !v.supports(prec)) continue;
      const DType data = data_type(prec);
      // Plain C = A*B with a poisoned C, then alpha/beta with a random C.
      std::vector<Ran> runs = {check(v, prec, data, 1.0, 0.0), check(v, prec, data, 0.5, 2.0)};
      if (data == DType::kF16 || data == DType::kBF16) {
        runs.push_back(check(v, prec, DType::kF32, 0.5, 2.0));
      }
      for (Ran r : runs) {
        if (r == Ran::kChecked) {
          ++ran;
        } else {
          refused.push_back(std::string(v.name) + " " + std::string(precision_name(prec)));
        }
      }
    }
  }
  if (selected == 0) GTEST_SKIP() << "no CUDA GEMM variant selected";
  for (const std::string& r : refused) std::cout << "refused (declared constraint): " << r << "\n";
  EXPECT_GT(ran, 0) << "every selected variant refused this case: nothing was checked";
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmVariantsGpu, ::testing::ValuesIn(all_cases()), case_name);

// Every CUDA variant computes some case of the list in every precision it claims (the registry's
// own check): a variant that refused everything would otherwise be checked nowhere. Its checks
// ask the device (sm_90-only kernels), so it runs where a GPU is visible; a variant this device
// cannot run at all ("needs an sm_... GPU") is reported, not failed.
TEST(GemmVariantsRegistry, EveryVariantAcceptsSomeCaseInEveryPrecisionItClaims) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
  for (const GemmVariant& v : gemm_variants()) {
    if (v.backend != Backend::kCuda) continue;
    for (Precision prec : kEveryPrecision) {
      if (prec == Precision::kF8 || !v.supports(prec)) continue;
      int accepted = 0;
      bool other_device = false;
      std::string last;
      for (const Case& c : all_cases()) {
        GemmProblem p;
        p.m = c.shape.m, p.n = c.shape.n, p.k = c.shape.k;
        p.a_trans = c.trans_a, p.b_trans = c.trans_b;
        p.lda = c.trans_a ? p.m : p.k;
        p.ldb = c.trans_b ? p.k : p.n;
        p.ldc = p.n;
        p.in_type = p.out_type = data_type(prec);
        p.precision = prec;
        const absl::Status s = check_gemm_variant(v, p);
        if (s.ok()) {
          ++accepted;
        } else {
          last = std::string(s.message());
          other_device = other_device || last.find("needs an sm_") != std::string::npos;
        }
      }
      if (accepted == 0 && other_device) {
        std::cout << v.name << " " << precision_name(prec) << ": not for this device (" << last
                  << ")\n";
        continue;
      }
      EXPECT_GT(accepted, 0) << v.name << " " << precision_name(prec)
                             << " refused every case; the last: " << last;
    }
  }
}

}  // namespace
}  // namespace matserve::kernels
