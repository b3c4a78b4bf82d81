// The tuned `auto` choice: the fastest measured variant of the problem's shape class that accepts
// the problem; batches ranked by their own class's rows first, then by the single product's.
#include "server/runtime/autotune_choice.h"

#include <gtest/gtest.h>

namespace matserve::server {
namespace {

constexpr char kDevice[] = "test GPU";

kernels::GemmProblem half_problem(std::int64_t size, std::int64_t count) {
  kernels::GemmProblem p;
  p.m = p.n = p.k = size;
  p.lda = p.ldb = p.ldc = size;
  p.precision = kernels::Precision::kF16;
  p.in_type = p.out_type = kernels::DType::kF16;
  p.batch.count = count;
  p.batch.stride_a = p.batch.stride_b = p.batch.stride_c = size * size;
  return p;
}

kernels::AutotuneTable table_of(std::string_view tsv) {
  absl::StatusOr<kernels::AutotuneTable> t = kernels::AutotuneTable::parse(tsv);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : kernels::AutotuneTable{};
}

TEST(AutotuneChoice, BatchClassNamesTheProductsClass) {
  EXPECT_EQ(kernels::gemm_batch_shape_class(64, 64, 64), "batch_ms_ns_ks");
  EXPECT_EQ(kernels::gemm_batch_shape_class(4096, 64, 4096), "batch_ml_ns_kl");
}

TEST(AutotuneChoice, NothingMeasuredForTheDeviceFallsBack) {
  const TunedChoice choose = make_tuned_choice(
      table_of("other GPU\tfp16\tms_ns_ks\tcpu_openblas\t1\n"), kDevice, kernels::Backend::kCpu);
  // The fallback is cuBLAS, absent from a CPU-only build.
  const kernels::GemmVariant* v = choose(half_problem(64, 1));
  if (v != nullptr) EXPECT_EQ(v->name, "cublas");
}

#ifdef MATSERVE_HAVE_CUDA
TEST(AutotuneChoice, BatchesRankByTheirOwnClassThenByTheProducts) {
  const TunedChoice choose =
      make_tuned_choice(table_of("test GPU\tfp16\tms_ns_ks\tcublaslt\t5000\n"
                                 "test GPU\tfp16\tms_ns_ks\tcublas\t4000\n"
                                 "test GPU\tfp16\tbatch_ms_ns_ks\tcublas\t9000\n"
                                 "test GPU\tfp16\tbatch_ms_ns_ks\tcublaslt\t8000\n"
                                 "test GPU\tfp16\tmm_nm_km\twgmma_tma_store\t9000\n"
                                 "test GPU\tfp16\tmm_nm_km\tmma_sync\t8000\n"),
                        kDevice, kernels::Backend::kCuda);
  const kernels::GemmVariant* single = choose(half_problem(64, 1));
  ASSERT_NE(single, nullptr);
  EXPECT_EQ(single->name, "cublaslt");
  const kernels::GemmVariant* batch = choose(half_problem(64, 1000));
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->name, "cublas");
  // No batch rows for 1024^3: the single product's ranking, the one-product-per-launch wgmma
  // kernel skipped.
  const kernels::GemmVariant* large = choose(half_problem(1024, 16));
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(large->name, "mma_sync");
}
#endif

}  // namespace
}  // namespace matserve::server
