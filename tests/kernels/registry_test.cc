// The registry: unique names, a description for every entry, look-ups, shared checks.
#include "kernels/registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace matserve::kernels {
namespace {

TEST(Registry, NamesAreUniqueAndEntriesDescribed) {
  std::set<std::string> names;
  for (const GemmVariant& v : gemm_variants()) {
    EXPECT_TRUE(names.insert(std::string(v.name)).second) << v.name;
    EXPECT_FALSE(v.description.empty()) << v.name;
    EXPECT_FALSE(v.family.empty()) << v.name;
    EXPECT_NE(v.precisions, 0u) << v.name;
    EXPECT_NE(v.launch, nullptr) << v.name;
  }
  for (const TransposeVariant& v : transpose_variants()) {
    EXPECT_TRUE(names.insert(std::string(v.name)).second) << v.name;
    EXPECT_FALSE(v.description.empty()) << v.name;
    EXPECT_NE(v.launch, nullptr) << v.name;
  }
  EXPECT_FALSE(names.count("auto")) << "'auto' is reserved for the server's choice";
}

TEST(Registry, CpuVariantsAreAlwaysPresent) {
  const GemmVariant* g = find_gemm_variant("cpu_openblas");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->backend, Backend::kCpu);
  ASSERT_NE(find_transpose_variant("cpu_blocked"), nullptr);
  EXPECT_EQ(find_gemm_variant("no_such_kernel"), nullptr);
#ifdef MATSERVE_HAVE_CUDA
  EXPECT_NE(find_gemm_variant("cublas"), nullptr);
  EXPECT_NE(find_transpose_variant("cublas_geam"), nullptr);
#endif
}

TEST(Registry, PrecisionCheckIsFailedPreconditionNamingTheVariant) {
  GemmVariant v{.name = "only_fp64",
                .family = "test",
                .description = "d",
                .precisions = precision_bit(Precision::kF64)};
  GemmProblem p;
  p.precision = Precision::kF32;
  absl::Status s = check_gemm_variant(v, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("only_fp64"), absl::string_view::npos);
  EXPECT_NE(s.message().find("fp64"), absl::string_view::npos);
  EXPECT_EQ(precision_list(precision_bit(Precision::kF32) | precision_bit(Precision::kTF32)),
            "fp32,tf32");
}

}  // namespace
}  // namespace matserve::kernels
