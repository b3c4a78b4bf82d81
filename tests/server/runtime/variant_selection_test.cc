// Variant selection: named look-ups with precise errors, auto's fallbacks and tuned choices, and
// auto never picking a variant whose constraints refuse the problem.
#include "server/runtime/variant_selection.h"

#include <gtest/gtest.h>

namespace matserve::server {
namespace {

kernels::GemmProblem fp32_problem() {
  kernels::GemmProblem p;
  p.m = p.n = p.k = 8;
  p.lda = p.ldb = p.ldc = 8;
  p.precision = kernels::Precision::kF32;
  return p;
}

TEST(VariantSelection, AutoOnTheCpuPicksOpenblas) {
  SelectionContext ctx{.backend = kernels::Backend::kCpu};
  auto v = select_gemm_variant("auto", fp32_problem(), ctx);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->name, "cpu_openblas");
  EXPECT_TRUE(select_gemm_variant("", fp32_problem(), ctx).ok());
}

TEST(VariantSelection, NamedErrorsAreCategorised) {
  SelectionContext ctx{.backend = kernels::Backend::kCpu};
  auto unknown = select_gemm_variant("warp9", fp32_problem(), ctx);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  auto wrong_op = select_gemm_variant("cpu_blocked", fp32_problem(), ctx);
  EXPECT_EQ(wrong_op.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_op.status().message().find("transpose kernel"), absl::string_view::npos);
  auto t = lookup_transpose_variant("cpu_openblas", kernels::Backend::kCpu);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
#ifdef MATSERVE_HAVE_CUDA
  auto other_backend = select_gemm_variant("cublas", fp32_problem(), ctx);
  EXPECT_EQ(other_backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other_backend.status().message().find("cuda backend"), absl::string_view::npos);
#endif
}

TEST(VariantSelection, TunedChoiceIsTakenWhenItCanImplement) {
  int asked = 0;
  SelectionContext ctx{.backend = kernels::Backend::kCpu,
                       .tuned = [&](const kernels::GemmProblem&) -> const kernels::GemmVariant* {
                         ++asked;
                         return kernels::find_gemm_variant("cpu_openblas");
                       }};
  auto v = select_gemm_variant("auto", fp32_problem(), ctx);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(asked, 1);
  EXPECT_EQ((*v)->name, "cpu_openblas");
  // No measured choice, or one of another backend, falls back to the defaults instead of failing.
  ctx.tuned = [](const kernels::GemmProblem&) -> const kernels::GemmVariant* { return nullptr; };
  EXPECT_TRUE(select_gemm_variant("auto", fp32_problem(), ctx).ok());
#ifdef MATSERVE_HAVE_CUDA
  ctx.tuned = [](const kernels::GemmProblem&) { return kernels::find_gemm_variant("cublas"); };
  auto other = select_gemm_variant("auto", fp32_problem(), ctx);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->backend, kernels::Backend::kCpu);
#endif
}

TEST(VariantSelection, TransposeAutoRespectsInPlace) {
  SelectionContext ctx{.backend = kernels::Backend::kCpu};
  int x = 0, y = 0;
  kernels::TransposeProblem p;
  p.rows = p.cols = 4;
  p.in = &x;
  p.out = &y;
  auto out_of_place = select_transpose_variant("auto", p, ctx);
  ASSERT_TRUE(out_of_place.ok());
  EXPECT_FALSE((*out_of_place)->in_place);
  p.out = &x;
  auto in_place = select_transpose_variant("auto", p, ctx);
  ASSERT_TRUE(in_place.ok());
  EXPECT_TRUE((*in_place)->in_place);
  auto refused = select_transpose_variant("cpu_blocked", p, ctx);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
}

#ifdef MATSERVE_HAVE_CUDA
TEST(VariantSelection, TransposeAutoTakesTheTileKernelForAlignedAndOddRows) {
  // Rows off 16-byte alignment (7 x 9 fp32) take the same kernel: its skewed tile keeps the
  // stores on whole sectors (94-95% of copy on the H100, cuBLAS geam 78-89%).
  SelectionContext ctx{.backend = kernels::Backend::kCuda};
  alignas(16) static float in[64], out[64];
  for (auto [rows, cols] : {std::pair{8, 8}, {7, 9}}) {
    for (kernels::DType dtype : {kernels::DType::kF32, kernels::DType::kF16}) {
      const kernels::TransposeProblem p = kernels::canonicalize_transpose(
          rows, cols, kernels::Layout::kRowMajor, dtype, in, out, 1.0);
      auto chosen = select_transpose_variant("auto", p, ctx);
      ASSERT_TRUE(chosen.ok()) << chosen.status();
      EXPECT_EQ((*chosen)->name, "transpose_vectorized") << rows << "x" << cols;
    }
  }
}
#endif

}  // namespace
}  // namespace matserve::server
