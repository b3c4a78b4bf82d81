// SIMT ladder beyond the generic harness: operands with padded leading dimensions and base
// pointers one element off 16-byte alignment (the 16-byte paths must fall back to element
// accesses), a C with ldc > n whose padding must stay untouched, and the dtype constraint
// reported as FAILED_PRECONDITION. Skips (visibly) without a GPU.
//
// MATSERVE_TEST_VARIANTS=a,b limits the variants.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/reference.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"
#include "tests/support/gemm_bound.h"
#include "tests/support/gpu_gemm_setup.h"
#include "tests/support/random_matrix.h"
#include "tests/support/variant_filter.h"

namespace matserve::kernels {
namespace {

struct LayoutCase {
  std::int64_t m, n, k;
  std::int64_t pad;    // added to every leading dimension
  std::int64_t shift;  // elements added to every base pointer
};

class SimtLayoutGpu : public testing::WithGpuStream<> {
 protected:
  void check(const GemmVariant& v, Precision prec, const LayoutCase& lc, bool ta, bool tb,
             std::uint64_t seed) {
    const DType t = prec == Precision::kF64 ? DType::kF64 : DType::kF32;
    const std::size_t es = dtype_size(t);
    GemmProblem p;
    p.m = lc.m;
    p.n = lc.n;
    p.k = lc.k;
    p.a_trans = ta;
    p.b_trans = tb;
    p.lda = (ta ? lc.m : lc.k) + lc.pad;
    p.ldb = (tb ? lc.k : lc.n) + lc.pad;
    p.ldc = lc.n + lc.pad;
    p.in_type = p.out_type = t;
    p.precision = prec;
    p.alpha = 0.5;
    p.beta = 2.0;
    const std::int64_t a_count = (ta ? lc.k : lc.m) * p.lda + lc.shift;
    const std::int64_t b_count = (tb ? lc.n : lc.k) * p.ldb + lc.shift;
    const std::int64_t c_count = lc.m * p.ldc + lc.shift;
    auto a = testing::random_matrix(a_count, t, seed);
    auto b = testing::random_matrix(b_count, t, seed + 1);
    auto c = testing::random_matrix(c_count, t, seed + 2);
    GemmProblem host = p;
    host.a = a.data() + lc.shift * es;
    host.b = b.data() + lc.shift * es;
    const std::vector<double> ref = reference_gemm(host, c.data() + lc.shift * es);
    const std::vector<double> magnitude = testing::gemm_magnitude(host, c.data() + lc.shift * es);

    auto da = allocate_device(a.size());
    auto db = allocate_device(b.size());
    auto dc = allocate_device(c.size());
    ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
    ASSERT_EQ(cudaMemcpy(da->data(), a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(db->data(), b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dc->data(), c.data(), c.size(), cudaMemcpyHostToDevice), cudaSuccess);
    // A pageable cudaMemcpy may return before its DMA lands, and the variant runs on a
    // non-blocking stream that does not wait for the legacy stream: finish the copies first.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    p.a = static_cast<std::byte*>(da->data()) + lc.shift * es;
    p.b = static_cast<std::byte*>(db->data()) + lc.shift * es;
    p.c = static_cast<std::byte*>(dc->data()) + lc.shift * es;
    const std::string what = std::string(v.name) + " " + std::string(precision_name(prec)) + " " +
                             std::to_string(lc.m) + "x" + std::to_string(lc.n) + "x" +
                             std::to_string(lc.k) + (ta ? " A^T" : "") + (tb ? " B^T" : "") +
                             " pad=" + std::to_string(lc.pad) +
                             " shift=" + std::to_string(lc.shift);
    ASSERT_TRUE(check_gemm_variant(v, p).ok()) << what;
    ASSERT_TRUE(v.launch(p, resources_->context()).ok()) << what;
    ASSERT_EQ(cudaStreamSynchronize(resources_->stream()), cudaSuccess) << what;
    std::vector<std::byte> out(c.size());
    ASSERT_EQ(cudaMemcpy(out.data(), dc->data(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    const testing::GemmCheck e =
        testing::check_gemm(host, out.data() + lc.shift * es, p.ldc, ref, magnitude);
    EXPECT_TRUE(e.ok()) << what << ": " << e.summary();
    // The padding columns of C (j >= n) and the elements before the shifted base are untouched.
    for (std::int64_t i = 0; i < lc.m; ++i) {
      for (std::int64_t j = lc.n; j < p.ldc; ++j) {
        const std::size_t off = (lc.shift + i * p.ldc + j) * es;
        ASSERT_EQ(std::memcmp(out.data() + off, c.data() + off, es), 0) << what << " wrote C pad";
      }
    }
    ASSERT_EQ(std::memcmp(out.data(), c.data(), lc.shift * es), 0) << what;
  }
};

TEST_F(SimtLayoutGpu, PaddedAndMisalignedOperandsMatchReference) {
  const LayoutCase cases[] = {
      {67, 45, 29, 3, 1}, {256, 256, 64, 1, 1}, {130, 260, 48, 4, 0}, {33, 129, 257, 2, 3}};
  std::uint64_t seed = 99;
  int checked = 0;
  for (const GemmVariant& v : gemm_variants()) {
    if (v.family != "simt" || !testing::variant_selected(v.name)) continue;
    for (Precision prec : {Precision::kF32, Precision::kF64}) {
      if (!v.supports(prec)) continue;
      for (const LayoutCase& lc : cases) {
        for (int t = 0; t < 4; ++t) check(v, prec, lc, t & 1, t & 2, seed++);
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMT variant in this build or selection";
}

// Regression (2026-11-22, H100): warptile fp64, 130x260x48, A^T and B^T, pad=4 failed once with
// a relative error of 0.79 and passed in every other run. Not reproduced since (2,560 runs of this
// case without the upload sync above, compute-sanitizer memcheck/racecheck/initcheck clean); the
// one defect found was the harness's: it launched on its non-blocking stream while the pageable
// upload of C (beta = 2) could still be in flight. The case again, fresh data each time, so that
// an upload or shared-memory race on these edge tiles has many chances to show.
TEST_F(SimtLayoutGpu, WarptileF64BothTransposedPad4EdgeTilesRepeated) {
  const GemmVariant* v = find_gemm_variant("warptile");
  if (v == nullptr || !testing::variant_selected(v->name))
    GTEST_SKIP() << "warptile not in this build or selection";
  for (int rep = 0; rep < 64 && !HasFailure(); ++rep) {
    check(*v, Precision::kF64, {130, 260, 48, 4, 0}, true, true, 7000 + rep);
  }
}

TEST_F(SimtLayoutGpu, WrongDtypeIsFailedPreconditionNamingTheConstraint) {
  for (const GemmVariant& v : gemm_variants()) {
    if (v.family != "simt") continue;
    GemmProblem p;
    p.m = p.n = p.k = 8;
    p.precision = Precision::kF32;
    p.in_type = DType::kF16;
    p.out_type = DType::kF32;
    const absl::Status s = check_gemm_variant(v, p);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << v.name;
    EXPECT_NE(s.message().find("fp32"), absl::string_view::npos) << v.name << ": " << s;
    EXPECT_FALSE(v.constraints.empty()) << v.name;
  }
}

}  // namespace
}  // namespace matserve::kernels
