// The fp8 scales a reply states: the request's for e4m3 data, the reported ones for data the
// server quantized, none where the launch reported none.
#include "server/service/proto_convert.h"

#include "gtest/gtest.h"

namespace matserve::server {
namespace {

TEST(Fp8ScalesUsed, E4m3DataUsesTheRequestsScales) {
  Outcome outcome;
  outcome.fp8_scales = {9.0f, 9.0f};  // not consulted for e4m3 data
  const std::optional<Fp8ScalePair> got =
      fp8_scales_used(kernels::DType::kF8E4M3, {0.5, 2.0}, outcome, 0);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->a, 0.5);
  EXPECT_EQ(got->b, 2.0);
}

TEST(Fp8ScalesUsed, QuantizedDataUsesEachProductsReportedScales) {
  Outcome outcome;
  outcome.fp8_scales = {0.25f, 0.5f, 1.5f, 3.0f};
  const std::optional<Fp8ScalePair> second =
      fp8_scales_used(kernels::DType::kBF16, {7.0, 7.0}, outcome, 1);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->a, 1.5);
  EXPECT_EQ(second->b, 3.0);
  EXPECT_EQ(fp8_scales_used(kernels::DType::kF32, {}, outcome, 0)->a, 0.25);
}

TEST(Fp8ScalesUsed, NoneWhereTheLaunchReportedNone) {
  Outcome outcome;
  EXPECT_FALSE(fp8_scales_used(kernels::DType::kF32, {}, outcome, 0).has_value());
  outcome.fp8_scales = {0.25f, 0.5f};
  EXPECT_FALSE(fp8_scales_used(kernels::DType::kF32, {}, outcome, 1).has_value());
}

}  // namespace
}  // namespace matserve::server
