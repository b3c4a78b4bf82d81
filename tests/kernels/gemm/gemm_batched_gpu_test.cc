// Every batched CUDA GEMM variant in the registry against the float64 reference, product by
// product: odd shapes, all four transpose states, alpha/beta, and the three ways a batch places
// its matrices (strided, one operand broadcast with stride 0, device pointer arrays in a shuffled
// order). Outputs are poisoned first. Skips (visibly) without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
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

enum class Placement { kStrided, kBroadcastA, kBroadcastB, kPointerArrays };

struct Case {
  std::int64_t m, n, k, count;
  bool trans_a, trans_b;
  Placement placement;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  static constexpr const char* kPlacement[] = {"strided", "broadcast_a", "broadcast_b", "arrays"};
  std::ostringstream s;
  s << c.count << "x" << c.m << "x" << c.n << "x" << c.k << "_" << (c.trans_a ? "T" : "N")
    << (c.trans_b ? "T" : "N") << "_" << kPlacement[static_cast<int>(c.placement)];
  return s.str();
}

std::vector<Case> all_cases() {
  struct Shape {
    std::int64_t m, n, k, count;
  };
  const std::vector<Shape> shapes = {
      {1, 1, 1, 2}, {7, 5, 3, 5}, {61, 17, 131, 3}, {64, 64, 64, 7}, {130, 257, 33, 2}};
  std::vector<Case> out;
  for (const Shape& s : shapes) {
    for (int t = 0; t < 4; ++t) {
      for (Placement pl : {Placement::kStrided, Placement::kBroadcastA, Placement::kBroadcastB,
                           Placement::kPointerArrays}) {
        out.push_back({s.m, s.n, s.k, s.count, (t & 1) != 0, (t & 2) != 0, pl});
      }
    }
  }
  return out;
}

class GemmBatchedGpu : public testing::WithGpuStream<::testing::TestWithParam<Case>> {
 protected:
  void check(const GemmVariant& v, Precision prec, DType out_type, double alpha, double beta,
             std::uint64_t seed) {
    const Case& c = GetParam();
    const DType in_type = data_type(prec);
    const std::int64_t a_elems = c.m * c.k, b_elems = c.k * c.n, c_elems = c.m * c.n;
    const std::int64_t a_count = c.placement == Placement::kBroadcastA ? 1 : c.count;
    const std::int64_t b_count = c.placement == Placement::kBroadcastB ? 1 : c.count;
    const std::size_t in_size = dtype_size(in_type), out_size = dtype_size(out_type);
    auto a = testing::random_matrix(a_elems * a_count, in_type, seed);
    auto b = testing::random_matrix(b_elems * b_count, in_type, seed + 1);
    std::vector<std::byte> c0 = testing::random_matrix(c_elems * c.count, out_type, seed + 2);
    if (beta == 0.0) testing::poison(c0.data(), c0.size());

    auto da = testing::to_device(a);
    auto db = testing::to_device(b);
    auto dc = testing::to_device(c0);
    auto arrays = allocate_device(3 * static_cast<std::size_t>(c.count) * sizeof(void*));
    ASSERT_TRUE(da.ok() && db.ok() && dc.ok() && arrays.ok());

    GemmProblem p = testing::dense_problem(c.m, c.n, c.k, c.trans_a, c.trans_b, in_type, out_type,
                                           prec, alpha, beta);
    p.batch.count = c.count;
    p.batch.stride_a = a_count == 1 ? 0 : a_elems;
    p.batch.stride_b = b_count == 1 ? 0 : b_elems;
    p.batch.stride_c = c_elems;
    // Product z's matrices, host and device: with pointer arrays, product z takes the stored
    // matrices of index count-1-z, so an kernel ignoring the arrays reads the wrong ones.
    const auto index = [&](std::int64_t z, std::int64_t stored) {
      if (stored == 1) return std::int64_t{0};
      return c.placement == Placement::kPointerArrays ? c.count - 1 - z : z;
    };
    std::vector<const void*> host_a, host_b, dev_a, dev_b;
    std::vector<void*> host_c, dev_c;
    for (std::int64_t z = 0; z < c.count; ++z) {
      const std::int64_t ia = index(z, a_count), ib = index(z, b_count), ic = index(z, c.count);
      host_a.push_back(a.data() + ia * a_elems * in_size);
      host_b.push_back(b.data() + ib * b_elems * in_size);
      host_c.push_back(c0.data() + ic * c_elems * out_size);
      dev_a.push_back(static_cast<std::byte*>(da->data()) + ia * a_elems * in_size);
      dev_b.push_back(static_cast<std::byte*>(db->data()) + ib * b_elems * in_size);
      dev_c.push_back(static_cast<std::byte*>(dc->data()) + ic * c_elems * out_size);
    }
    std::vector<std::vector<double>> refs, magnitudes;
    std::vector<GemmProblem> hosts;
    for (std::int64_t z = 0; z < c.count; ++z) {
      GemmProblem host = p;
      host.batch = GemmBatch{};
      host.a = host_a[static_cast<std::size_t>(z)];
      host.b = host_b[static_cast<std::size_t>(z)];
      refs.push_back(reference_gemm(host, host_c[static_cast<std::size_t>(z)]));
      magnitudes.push_back(testing::gemm_magnitude(host, host_c[static_cast<std::size_t>(z)]));
      hosts.push_back(host);
    }
    if (c.placement == Placement::kPointerArrays) {
      std::vector<const void*> all(dev_a);
      all.insert(all.end(), dev_b.begin(), dev_b.end());
      all.insert(all.end(), dev_c.begin(), dev_c.end());
      ASSERT_EQ(cudaMemcpy(arrays->data(), all.data(), all.size() * sizeof(void*),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      auto* base = static_cast<void**>(arrays->data());
      p.batch.a_array = const_cast<const void* const*>(base);
      p.batch.b_array = const_cast<const void* const*>(base + c.count);
      p.batch.c_array = base + 2 * c.count;
      p.batch.arrays_aligned16 = std::all_of(all.begin(), all.end(), [](const void* x) {
        return reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
      });
    }
    p.a = da->data();
    p.b = db->data();
    p.c = dc->data();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string what = std::string(v.name) + " " + std::string(precision_name(prec)) +
                             " out=" + std::string(dtype_name(out_type)) +
                             " beta=" + std::to_string(beta);
    if (absl::Status s = check_gemm_variant(v, p); !s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << what << ": " << s;
      return;
    }
    absl::Status st = v.launch(p, resources_->context());
    ASSERT_TRUE(st.ok()) << what << ": " << st;
    ASSERT_EQ(cudaStreamSynchronize(resources_->stream()), cudaSuccess) << what;

    std::vector<std::byte> out(c0.size());
    ASSERT_EQ(cudaMemcpy(out.data(), dc->data(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (std::int64_t z = 0; z < c.count; ++z) {
      const std::byte* got = out.data() + index(z, c.count) * c_elems * out_size;
      const auto zi = static_cast<std::size_t>(z);
      const testing::GemmCheck e =
          testing::check_gemm(hosts[zi], got, c.n, refs[zi], magnitudes[zi]);
      EXPECT_TRUE(e.ok()) << what << " product " << z << ": " << e.summary();
    }
  }
};

TEST_P(GemmBatchedGpu, EveryProductMatchesFloat64Reference) {
  int checked = 0;
  std::uint64_t seed = 99;
  for (const GemmVariant& v : gemm_variants()) {
    if (v.backend != Backend::kCuda || !v.batched || !testing::variant_selected(v.name)) continue;
    for (Precision prec : kEveryPrecision) {
      // fp8 has its own scaled-reference test (tensor_core_fp8_gpu_test).
      if (prec == Precision::kF8 || !v.supports(prec)) continue;
      const DType data = data_type(prec);
      check(v, prec, data, 1.0, 0.0, seed++);
      check(v, prec, data, 0.5, 2.0, seed++);
      if (data == DType::kF16 || data == DType::kBF16) {
        check(v, prec, DType::kF32, 0.5, 2.0, seed++);
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no batched CUDA GEMM variant selected";
}

// A variant that is not batched refuses a batch with a message naming the batched ones.
TEST(GemmBatchedRegistry, UnbatchedVariantsRefuseBatches) {
  GemmProblem p;
  p.m = p.n = p.k = 8;
  p.lda = p.ldb = p.ldc = 8;
  p.batch.count = 4;
  for (const GemmVariant& v : gemm_variants()) {
    if (v.batched || !v.supports(Precision::kF32)) continue;
    const absl::Status s = check_gemm_variant(v, p);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << v.name;
    EXPECT_NE(s.message().find("cublas"), std::string::npos) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmBatchedGpu, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace matserve::kernels
