// The .npy reader against files written by NumPy itself (tests/client/data, made by
// make_npy_fixtures.py): C and Fortran order, 1-D, format 2.0 and 3.0, bf16 bits as '<u2', and the
// kinds NumPy writes that a matrix service must refuse.
#include <string>

#include "client/cpp/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/element.h"

namespace matserve::client {
namespace {

using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return std::string(MATSERVE_CLIENT_TEST_DATA) + "/" + name;
}

double at(const NpyArray& a, std::int64_t index) {
  return kernels::load_element(a.bytes.data(), a.dtype, index);
}

TEST(NumpyFiles, COrderFloat32) {
  absl::StatusOr<NpyArray> a = read_npy(Fixture("c_f4.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rows, 2);
  EXPECT_EQ(a->cols, 3);
  EXPECT_EQ(a->layout, Layout::kRowMajor);
  EXPECT_EQ(at(*a, 4), 1.5);  // (1, 1) = 4 - 2.5
}

TEST(NumpyFiles, FortranOrderFloat64IsColumnMajor) {
  absl::StatusOr<NpyArray> a = read_npy(Fixture("f_f8.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dtype, DType::kF64);
  EXPECT_EQ(a->layout, Layout::kColMajor);
  // (i, j) = 3 i + j + 0.5 at index j * 2 + i.
  EXPECT_EQ(at(*a, 2 * 2 + 1), 3 * 1 + 2 + 0.5);
}

TEST(NumpyFiles, OneDimensionalFloat16) {
  absl::StatusOr<NpyArray> a = read_npy(Fixture("v_f2.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rows, 1);
  EXPECT_EQ(a->cols, 3);
  EXPECT_EQ(at(*a, 1), -2.0);
}

TEST(NumpyFiles, FormatVersions2And3) {
  for (const char* name : {"v2_f4.npy", "v3_f4.npy"}) {
    absl::StatusOr<NpyArray> a = read_npy(Fixture(name));
    ASSERT_TRUE(a.ok()) << name << ": " << a.status();
    EXPECT_EQ(at(*a, 1), 2.5) << name;
  }
}

TEST(NumpyFiles, Bf16BitsAsUint16WhenAsked) {
  EXPECT_FALSE(read_npy(Fixture("bf16_u2.npy")).ok());
  NpyReadOptions options;
  options.bf16 = true;
  absl::StatusOr<NpyArray> a = read_npy(Fixture("bf16_u2.npy"), options);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dtype, DType::kBF16);
  EXPECT_EQ(at(*a, 0), 1.0);
  EXPECT_EQ(at(*a, 1), 2.0);
}

TEST(NumpyFiles, RefusedKinds) {
  EXPECT_THAT(read_npy(Fixture("be_f4.npy")).status().message(),
              HasSubstr("big-endian dtype '>f4'"));
  EXPECT_THAT(read_npy(Fixture("obj.npy")).status().message(), HasSubstr("object dtype '|O'"));
  EXPECT_THAT(read_npy(Fixture("f4_3d.npy")).status().message(),
              HasSubstr("3-D shape (2, 2, 2) is not supported"));
  EXPECT_THAT(read_npy(Fixture("scalar_f4.npy")).status().message(), HasSubstr("0-D array"));
}

}  // namespace
}  // namespace matserve::client
