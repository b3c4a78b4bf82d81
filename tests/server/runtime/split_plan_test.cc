// The split of one GEMM over devices (split_plan.h), checked on the host: bands and tiles cover C
// exactly once, and a product assembled from the home band computed in place and every helper tile
// computed from packed copies (memcpy standing in for cudaMemcpy2D) equals the whole product, for
// every operand order, odd shapes and 2 to 4 devices.
#include "server/runtime/split_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cpu/reference.h"
#include "tests/server/runtime/strided_copies.h"

namespace matserve::server {
namespace {

using kernels::GemmProblem;
using testing::compute_packed_tile;
using testing::copy_strided;
using testing::equals_whole;
using testing::strided_product;
using testing::StridedProduct;

// How many times each element of an m x n C is covered by the plan's home band and helper tiles.
std::vector<int> coverage(const SplitPlan& plan, std::int64_t m, std::int64_t n) {
  std::vector<int> hits(static_cast<std::size_t>(m * n), 0);
  const auto mark = [&](const CBlock& b) {
    for (std::int64_t i = b.row0; i < b.row0 + b.rows; ++i) {
      for (std::int64_t j = b.col0; j < b.col0 + b.cols; ++j)
        ++hits[static_cast<std::size_t>(i * n + j)];
    }
  };
  mark(plan.home);
  for (const HelperBand& h : plan.helpers) {
    for (const HelperTile& t : h.tiles) mark(t.block);
  }
  return hits;
}

TEST(SplitPlan, BandsAndTilesCoverEveryElementOnce) {
  for (const auto [m, n] : {std::pair<std::int64_t, std::int64_t>{1, 1},
                            {2, 1},
                            {1, 7},
                            {37, 11},
                            {11, 37},
                            {64, 64},
                            {100, 3},
                            {5, 1000}}) {
    for (int devices : {1, 2, 3, 4, 8}) {
      for (std::int64_t tile : {1, 4, 16, 1000}) {
        const SplitPlan plan = plan_split(m, n, devices, tile);
        EXPECT_EQ(plan.by_rows, m >= n);
        EXPECT_EQ(plan.home.row0, 0);
        EXPECT_EQ(plan.home.col0, 0);
        const std::int64_t longer = std::max(m, n);
        EXPECT_EQ(static_cast<std::int64_t>(plan.helpers.size()),
                  std::min<std::int64_t>(devices, longer) - 1)
            << m << "x" << n << " on " << devices;
        for (int hits : coverage(plan, m, n))
          ASSERT_EQ(hits, 1) << m << "x" << n << " on " << devices;
        for (const HelperBand& h : plan.helpers) {
          for (const HelperTile& t : h.tiles) {
            EXPECT_LE(t.block.rows, tile);
            EXPECT_LE(t.block.cols, tile);
            EXPECT_EQ(t.block.row0, h.a_pieces[static_cast<std::size_t>(t.a_piece)].row0);
            EXPECT_EQ(t.block.col0, h.b_pieces[static_cast<std::size_t>(t.b_piece)].col0);
          }
        }
      }
    }
  }
}

TEST(SplitPlan, TheHomeBandTakesTheRemainderAndTheOthersEqualShares) {
  const SplitPlan plan = plan_split(/*m=*/10, /*n=*/4, /*devices=*/3, /*tile=*/100);
  EXPECT_EQ(plan.home, (CBlock{.row0 = 0, .rows = 4, .col0 = 0, .cols = 4}));
  ASSERT_EQ(plan.helpers.size(), 2U);
  EXPECT_EQ(plan.helpers[0].band, (CBlock{.row0 = 4, .rows = 3, .col0 = 0, .cols = 4}));
  EXPECT_EQ(plan.helpers[1].band, (CBlock{.row0 = 7, .rows = 3, .col0 = 0, .cols = 4}));
}

// Writes the dense row-major m x n `values` into C's block `b` (leading dimension ldc).
void put_block(const std::vector<double>& values, const CBlock& b, std::int64_t ldc,
               std::vector<double>& c) {
  for (std::int64_t i = 0; i < b.rows; ++i) {
    for (std::int64_t j = 0; j < b.cols; ++j) {
      c[static_cast<std::size_t>((b.row0 + i) * ldc + b.col0 + j)] =
          values[static_cast<std::size_t>(i * b.cols + j)];
    }
  }
}

TEST(SplitPlan, AssembledProductEqualsTheWholeForEveryOperandOrder) {
  std::mt19937 rng(7);
  for (bool a_trans : {false, true}) {
    for (bool b_trans : {false, true}) {
      for (const auto [m, n, k] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1},
                                   {7, 13, 5},
                                   {37, 11, 29},
                                   {64, 3, 17},
                                   {3, 65, 19},
                                   {50, 50, 1}}) {
        for (int devices : {2, 3, 4}) {
          const StridedProduct product = strided_product(m, n, k, a_trans, b_trans, rng);
          GemmProblem p = product.p;
          const std::vector<double>& c0 = product.c0;
          const std::int64_t ldc = p.ldc;
          const std::vector<double> whole = kernels::reference_gemm_naive(p, c0.data());

          std::vector<double> c = c0;  // C as the home device holds it, written band by band
          p.c = c.data();
          const SplitPlan plan = plan_split(m, n, devices, /*tile=*/4);
          // The home band, in place: its operands and C as they lie.
          const GemmProblem home = view(p, plan.home);
          std::vector<double> home_c0(static_cast<std::size_t>(plan.home.rows * plan.home.cols));
          for (std::int64_t i = 0; i < plan.home.rows; ++i) {
            for (std::int64_t j = 0; j < plan.home.cols; ++j) {
              home_c0[static_cast<std::size_t>(i * plan.home.cols + j)] =
                  c0[static_cast<std::size_t>(i * ldc + j)];
            }
          }
          GemmProblem home_dense = home;
          home_dense.ldc = plan.home.cols;
          put_block(kernels::reference_gemm_naive(home_dense, home_c0.data()), plan.home, ldc, c);
          EXPECT_EQ(home.c, static_cast<void*>(c.data()));
          EXPECT_EQ(home.lda, product.p.lda);
          // Every helper tile from packed copies of its pieces and of C's block.
          for (const HelperBand& h : plan.helpers) {
            for (const HelperTile& t : h.tiles) {
              const CBlock& ap = h.a_pieces[static_cast<std::size_t>(t.a_piece)];
              const CBlock& bp = h.b_pieces[static_cast<std::size_t>(t.b_piece)];
              const StridedBytes as = a_rows(p, ap.row0, ap.rows);
              const StridedBytes bs = b_cols(p, bp.col0, bp.cols);
              std::vector<std::byte> ap_packed(as.packed_bytes());
              std::vector<std::byte> bp_packed(bs.packed_bytes());
              std::vector<std::byte> c_packed(c_block(p, t.block).packed_bytes());
              copy_strided(product.a.data(), as, ap_packed.data());
              copy_strided(product.b.data(), bs, bp_packed.data());
              compute_packed_tile(p, t.block, ap_packed.data(), bp_packed.data(), c0,
                                  c_packed.data(), c);
            }
          }
          ASSERT_TRUE(equals_whole(c, ldc, whole, m, n))
              << "a_trans " << a_trans << " b_trans " << b_trans << " " << m << "x" << n << "x" << k
              << " on " << devices << " devices";
        }
      }
    }
  }
}

}  // namespace
}  // namespace matserve::server
