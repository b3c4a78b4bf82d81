// Precision rules: which (data, compute) pairs resolve, which outputs are allowed.
#include "kernels/precision.h"

#include <gtest/gtest.h>

namespace matserve::kernels {
namespace {

TEST(Precision, DefaultComputeFollowsTheDataType) {
  EXPECT_EQ(*resolve_precision(DType::kF64, Compute::kDefault), Precision::kF64);
  EXPECT_EQ(*resolve_precision(DType::kF32, Compute::kDefault), Precision::kF32);
  EXPECT_EQ(*resolve_precision(DType::kF16, Compute::kDefault), Precision::kF16);
  EXPECT_EQ(*resolve_precision(DType::kBF16, Compute::kDefault), Precision::kBF16);
}

TEST(Precision, Fp32DataMayUseReducedPrecisionMath) {
  EXPECT_EQ(*resolve_precision(DType::kF32, Compute::kTF32), Precision::kTF32);
  EXPECT_EQ(*resolve_precision(DType::kF32, Compute::kF16), Precision::kF16);
  EXPECT_EQ(*resolve_precision(DType::kF32, Compute::kBF16), Precision::kBF16);
  EXPECT_EQ(kernel_operand_dtype(DType::kF32, Precision::kF16), DType::kF16);
  EXPECT_EQ(kernel_operand_dtype(DType::kF32, Precision::kTF32), DType::kF32);
}

TEST(Precision, ImpossiblePairsAreInvalidArgumentNamingTheField) {
  auto r = resolve_precision(DType::kF64, Compute::kTF32);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("compute"), absl::string_view::npos);
  EXPECT_FALSE(resolve_precision(DType::kF16, Compute::kBF16).ok());
  EXPECT_FALSE(resolve_precision(DType::kF32, Compute::kF64).ok());
}

TEST(Precision, OutputTypes) {
  EXPECT_TRUE(check_output_dtype(DType::kF16, DType::kF32).ok());
  EXPECT_TRUE(check_output_dtype(DType::kBF16, DType::kBF16).ok());
  EXPECT_FALSE(check_output_dtype(DType::kF32, DType::kF16).ok());
  EXPECT_FALSE(check_output_dtype(DType::kF64, DType::kF32).ok());
}

}  // namespace
}  // namespace matserve::kernels
