// Matrix message helpers: enum round trips, length checks, dtype conversion, layout changes and
// reproducible random matrices.
#include "client/cpp/matrix.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/element.h"

namespace matserve::client {
namespace {

using ::testing::HasSubstr;

TEST(Matrix, EnumsRoundTrip) {
  for (DType t : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16}) {
    absl::StatusOr<DType> back = from_proto(to_proto(t));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, t);
    absl::StatusOr<DType> parsed = parse_dtype(DTypeName(to_proto(t)));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(from_proto(v1::DATA_TYPE_UNSPECIFIED).ok());
  EXPECT_EQ(from_proto(to_proto(Layout::kColMajor)), Layout::kColMajor);
  EXPECT_EQ(to_proto(DType::kF8E4M3), v1::FP8_E4M3);
  EXPECT_EQ(*from_proto(v1::FP8_E4M3), DType::kF8E4M3);
  EXPECT_EQ(DTypeName(v1::FP8_E4M3), "fp8_e4m3");
  for (const char* mode : {"default", "fp64", "fp32", "tf32", "fp16", "bf16", "fp8"}) {
    absl::StatusOr<v1::ComputeMode> m = parse_compute_mode(mode);
    ASSERT_TRUE(m.ok()) << mode;
    EXPECT_EQ(compute_mode_name(*m), mode);
  }
  EXPECT_THAT(parse_dtype("float").status().message(), HasSubstr("unknown dtype 'float'"));
  EXPECT_THAT(parse_layout("diag").status().message(), HasSubstr("unknown layout 'diag'"));
  EXPECT_THAT(parse_compute_mode("fp4").status().message(), HasSubstr("unknown compute mode"));
}

TEST(Matrix, MakeMatrixChecksTheByteLength) {
  absl::StatusOr<v1::Matrix> ok =
      make_matrix(2, 3, DType::kF16, Layout::kColMajor, std::string(12, 'x'));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->dtype(), v1::FP16);
  EXPECT_EQ(ok->layout(), v1::COL_MAJOR);
  EXPECT_EQ(ok->data().size(), 12u);
  EXPECT_THAT(
      make_matrix(2, 3, DType::kF32, Layout::kRowMajor, std::string(12, 'x')).status().message(),
      HasSubstr("12 bytes do not hold a 2 x 3 fp32 matrix (24 bytes)"));
  EXPECT_FALSE(make_matrix(-1, 3, DType::kF32, Layout::kRowMajor, "").ok());
}

TEST(Matrix, NpyAndMatrixConvertBothWays) {
  NpyArray a = random_matrix(3, 4, DType::kF32, Layout::kColMajor, 7);
  const std::string bytes = a.bytes;
  absl::StatusOr<v1::Matrix> m = matrix_from_npy(std::move(a));
  ASSERT_TRUE(m.ok());
  absl::StatusOr<NpyArray> back = npy_from_matrix(*m);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->bytes, bytes);
  EXPECT_EQ(back->layout, Layout::kColMajor);
  m->mutable_data()->pop_back();
  EXPECT_FALSE(npy_from_matrix(*m).ok());
}

TEST(Matrix, ConvertElementsRoundsToTheTargetType) {
  const NpyArray a = random_matrix(5, 7, DType::kF64, Layout::kRowMajor, 3);
  const std::string h = convert_elements(a.bytes, DType::kF64, DType::kF16);
  ASSERT_EQ(h.size(), 35u * 2);
  for (int i = 0; i < 35; ++i) {
    const double x = kernels::load_element(a.bytes.data(), DType::kF64, i);
    EXPECT_NEAR(kernels::load_element(h.data(), DType::kF16, i), x, 1e-3);
  }
  EXPECT_EQ(convert_elements(a.bytes, DType::kF64, DType::kF64), a.bytes);
}

TEST(Matrix, ToLayoutTransposesStorage) {
  const NpyArray row = random_matrix(3, 5, DType::kF32, Layout::kRowMajor, 11);
  const NpyArray col = random_matrix(3, 5, DType::kF32, Layout::kColMajor, 11);
  EXPECT_EQ(to_layout(row.bytes, 3, 5, DType::kF32, Layout::kRowMajor, Layout::kColMajor),
            col.bytes);
  EXPECT_EQ(to_layout(col.bytes, 3, 5, DType::kF32, Layout::kColMajor, Layout::kRowMajor),
            row.bytes);
  // Element (i, j) of the column-major copy sits at j * rows + i.
  EXPECT_EQ(kernels::load_element(col.bytes.data(), DType::kF32, 4 * 3 + 2),
            kernels::load_element(row.bytes.data(), DType::kF32, 2 * 5 + 4));
}

TEST(Matrix, RandomMatricesAreReproducibleNonZeroAndInRange) {
  const NpyArray a = random_matrix(17, 9, DType::kF32, Layout::kRowMajor, 42);
  EXPECT_EQ(a.bytes, random_matrix(17, 9, DType::kF32, Layout::kRowMajor, 42).bytes);
  EXPECT_NE(a.bytes, random_matrix(17, 9, DType::kF32, Layout::kRowMajor, 43).bytes);
  for (int i = 0; i < 17 * 9; ++i) {
    const double v = kernels::load_element(a.bytes.data(), DType::kF32, i);
    EXPECT_NE(v, 0.0);
    EXPECT_GE(v, -1.0);
    EXPECT_LT(v, 1.0);
  }
}

}  // namespace
}  // namespace matserve::client
