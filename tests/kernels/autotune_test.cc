// The autotune table: shape classes, TSV parse (and its errors), round trip, and choose():
// fastest measured variant per class, cuBLAS when nothing was measured, filters respected.
#include "kernels/autotune.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/autotune_builtin.h"

namespace matserve::kernels {
namespace {

constexpr char kDevice[] = "NVIDIA H100 80GB HBM3";

TEST(GemmShapeClass, BucketsEachDimension) {
  EXPECT_EQ(gemm_shape_class(4096, 4096, 4096), "ml_nl_kl");
  EXPECT_EQ(gemm_shape_class(2048, 2048, 2048), "ml_nl_kl");
  EXPECT_EQ(gemm_shape_class(8192, 8192, 64), "mh_nh_ks");
  EXPECT_EQ(gemm_shape_class(10000, 10000, 25), "mh_nh_kt");
  EXPECT_EQ(gemm_shape_class(25, 25, 10000), "mt_nt_kh");
  EXPECT_EQ(gemm_shape_class(1, 1, 1), "mt_nt_kt");
  EXPECT_EQ(gemm_shape_class(512, 1024, 1536), "mm_nm_km");
}

TEST(AutotuneTable, ParsesTsvWithCommentsAndAveragesDuplicates) {
  const std::string tsv =
      std::string("# header\n") + kDevice + "\tfp32\tml_nl_kl\tcublas\t50000\n" + kDevice +
      "\tfp32\tml_nl_kl\twarptile\t40000\n" + kDevice + "\tfp32\tml_nl_kl\twarptile\t62000\n\n";
  auto t = AutotuneTable::parse(tsv);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->entries().size(), 3u);
  // warptile averages 51000 > 50000.
  EXPECT_EQ(t->choose(kDevice, Precision::kF32, 4096, 4096, 4096), "warptile");
}

TEST(AutotuneTable, RejectsMalformedLines) {
  EXPECT_FALSE(AutotuneTable::parse("a\tfp32\tc\tv\n").ok());        // 4 fields
  EXPECT_FALSE(AutotuneTable::parse("a\tfp99\tc\tv\t1\n").ok());     // precision
  EXPECT_FALSE(AutotuneTable::parse("a\tfp32\tc\tv\tfast\n").ok());  // number
  EXPECT_FALSE(AutotuneTable::parse("a\tfp32\t\tv\t1\n").ok());      // empty class
  const auto s = AutotuneTable::parse("ok\tfp32\tc\tv\t1\nbad line\n").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("line 2"), absl::string_view::npos);
}

TEST(AutotuneTable, RoundTripsThroughTsv) {
  AutotuneTable t;
  t.add({kDevice, Precision::kF64, "mh_nh_kh", "simt_pipelined", 30000.5});
  t.add({kDevice, Precision::kF32, "mt_nt_kh", "cublas", 812.25});
  auto back = AutotuneTable::parse(t.to_tsv());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->entries().size(), 2u);
  EXPECT_EQ(back->entries()[0].variant, "simt_pipelined");
  EXPECT_EQ(back->entries()[0].precision, Precision::kF64);
  EXPECT_DOUBLE_EQ(back->entries()[1].gflops, 812.25);
}

TEST(AutotuneTable, FallsBackToCublasWhenNothingMeasured) {
  AutotuneTable t;
  t.add({kDevice, Precision::kF32, "ml_nl_kl", "warptile", 40000});
  EXPECT_EQ(t.choose(kDevice, Precision::kF32, 25, 25, 10000), "cublas");     // other class
  EXPECT_EQ(t.choose(kDevice, Precision::kF64, 4096, 4096, 4096), "cublas");  // other precision
  EXPECT_EQ(t.choose("NVIDIA A100", Precision::kF32, 4096, 4096, 4096), "cublas");  // device
  EXPECT_EQ(AutotuneTable().choose(kDevice, Precision::kF32, 1, 1, 1), "cublas");
}

TEST(AutotuneTable, NeverPicksSlowerThanCublasAndTiesGoToCublas) {
  AutotuneTable t;
  t.add({kDevice, Precision::kF32, "mt_nt_kh", "cublas", 900});
  t.add({kDevice, Precision::kF32, "mt_nt_kh", "warptile", 100});
  EXPECT_EQ(t.choose(kDevice, Precision::kF32, 25, 25, 10000), "cublas");
  t.add({kDevice, Precision::kF32, "mh_nh_kh", "cublas", 500});
  t.add({kDevice, Precision::kF32, "mh_nh_kh", "naive", 500});
  EXPECT_EQ(t.choose(kDevice, Precision::kF32, 8192, 8192, 8192), "cublas");
}

TEST(AutotuneTable, SkipsVariantsTheFilterRefuses) {
  AutotuneTable t;
  t.add({kDevice, Precision::kF32, "ml_nl_kl", "cublas", 50000});
  t.add({kDevice, Precision::kF32, "ml_nl_kl", "fast_but_refused", 60000});
  const auto usable = [](std::string_view v) { return v != "fast_but_refused"; };
  EXPECT_EQ(t.choose(kDevice, Precision::kF32, 4096, 4096, 4096), "fast_but_refused");
  EXPECT_EQ(t.choose(kDevice, Precision::kF32, 4096, 4096, 4096, usable), "cublas");
}

TEST(AutotuneTable, RankedListsTheClassFastestFirstWithCublasWinningTies) {
  AutotuneTable t;
  t.add({kDevice, Precision::kF32, "ms_ns_ks", "simt_tuned", 300});
  t.add({kDevice, Precision::kF32, "ms_ns_ks", "simt_tuned", 500});  // mean 400
  t.add({kDevice, Precision::kF32, "ms_ns_ks", "smem_tiled_16", 450});
  t.add({kDevice, Precision::kF32, "ms_ns_ks", "cublas", 400});
  t.add({kDevice, Precision::kF64, "ms_ns_ks", "naive", 9999});           // other precision
  t.add({"NVIDIA A100", Precision::kF32, "ms_ns_ks", "warptile", 9999});  // other device
  EXPECT_EQ(t.ranked(kDevice, Precision::kF32, "ms_ns_ks"),
            (std::vector<std::string>{"smem_tiled_16", "cublas", "simt_tuned"}));
  EXPECT_TRUE(t.ranked(kDevice, Precision::kF32, "ml_nl_kl").empty());
  EXPECT_EQ(t.choose(kDevice, Precision::kF32, 200, 200, 200), "smem_tiled_16");
}

TEST(AutotuneTable, BuiltInTablesParseAndNameEveryVariantTheyRecommend) {
  absl::StatusOr<AutotuneTable> t = AutotuneTable::parse(builtin_autotune_tsv());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_FALSE(t->entries().empty());
  for (const AutotuneEntry& e : t->entries()) {
    EXPECT_FALSE(e.device.empty());
    EXPECT_GT(e.gflops, 0.0) << e.device << " " << e.shape_class << " " << e.variant;
  }
}

TEST(AutotuneTable, BuiltInH100RowsPreferWhatTheServiceRanFastest) {
  // kernels/autotune/h100-service.tsv: every precision measured through the service (each launch
  // replayed from its CUDA graph, device time). Small fp32 and fp64 products go to cuBLAS, not to
  // a tile kernel whose kernel-level figure beat cuBLAS's launch-bound one; aligned 4096^3 bf16
  // goes to the wgmma kernel; a shape the wgmma kernel cannot take falls to cuBLASLt; fp64 with a
  // short k to the fp64 tensor-core kernel.
  absl::StatusOr<AutotuneTable> t = AutotuneTable::parse(builtin_autotune_tsv());
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string h100 = "NVIDIA H100 80GB HBM3";
  EXPECT_EQ(t->choose(h100, Precision::kF32, 256, 256, 256), "cublas");
  EXPECT_EQ(t->choose(h100, Precision::kF64, 256, 256, 256), "cublas");
  EXPECT_EQ(t->choose(h100, Precision::kBF16, 4096, 4096, 4096), "wgmma_tma_store");
  const auto no_wgmma = [](std::string_view v) { return v != "wgmma_tma_store"; };
  EXPECT_EQ(t->choose(h100, Precision::kBF16, 4095, 4093, 4097, no_wgmma), "cublaslt");
  EXPECT_EQ(t->choose(h100, Precision::kF64, 10000, 10000, 25), "dmma");
}

TEST(AutotuneTable, LoadReportsMissingFile) {
  EXPECT_EQ(AutotuneTable::load("/nonexistent/autotune.tsv").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace matserve::kernels
