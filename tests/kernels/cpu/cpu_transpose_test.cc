// The CPU transpose: exact for every dtype and the thesis's shapes, scale applied, both layouts.
#include "kernels/cpu/cpu_transpose.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/element.h"
#include "kernels/cpu/reference.h"
#include "tests/support/random_matrix.h"

namespace matserve::kernels {
namespace {

TEST(CpuTranspose, ExactForEveryDtypeAndShape) {
  for (DType t : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16}) {
    for (auto [rows, cols] : {std::pair<int, int>{1, 1}, {1, 77}, {77, 1}, {33, 65}, {100, 37}}) {
      auto in = testing::random_matrix(rows * cols, t, 5);
      std::vector<std::byte> out(in.size());
      testing::poison(out.data(), out.size());
      const TransposeProblem p =
          canonicalize_transpose(rows, cols, Layout::kRowMajor, t, in.data(), out.data(), 1.0);
      ASSERT_TRUE(cpu_blocked_transpose(p, {}).ok());
      for (int i = 0; i < rows; ++i) {
        for (int j = 0; j < cols; ++j) {
          const std::size_t sz = dtype_size(t);
          ASSERT_EQ(std::memcmp(&out[(j * rows + i) * sz], &in[(i * cols + j) * sz], sz), 0)
              << dtype_name(t) << " " << rows << "x" << cols;
        }
      }
    }
  }
}

TEST(CpuTranspose, ScaleAndColumnMajor) {
  const std::vector<double> in = {1, 2, 3, 4, 5, 6};  // 2 x 3 column-major: [[1,3,5],[2,4,6]]
  std::vector<double> out(6, NAN);
  const TransposeProblem p =
      canonicalize_transpose(2, 3, Layout::kColMajor, DType::kF64, in.data(), out.data(), -2.0);
  ASSERT_TRUE(cpu_blocked_transpose(p, {}).ok());
  // Result 3 x 2 column-major of -2 * A^T = [[-2,-4],[-6,-8],[-10,-12]] -> columns (-2,-6,-10),
  // (-4,-8,-12).
  EXPECT_EQ(out, (std::vector<double>{-2, -6, -10, -4, -8, -12}));
  const auto ref = reference_transpose(p);
  EXPECT_EQ(compare_with_reference(out.data(), DType::kF64, 3, 2, 2, ref).max_abs_error, 0.0);
}

}  // namespace
}  // namespace matserve::kernels
