// The out-of-core GEMM plan (out_of_core_plan.h), checked on the host: the tiles cover C once,
// every tile finds its A' piece and B' block in the slots it names, each piece is loaded once, the
// plan fits the memory it was given, and a product computed as the CUDA backend runs the plan
// (slots as packed buffers filled by memcpy standing in for cudaMemcpy2D) equals the whole
// product for every operand order, with C, on odd shapes and budgets that force several panels.
#include "server/runtime/out_of_core_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/reference.h"
#include "server/runtime/memory_pool.h"
#include "tests/server/runtime/strided_copies.h"

namespace matserve::server {
namespace {

using kernels::GemmProblem;
using testing::compute_packed_tile;
using testing::copy_strided;
using testing::equals_whole;
using testing::strided_product;
using testing::StridedProduct;

GemmProblem shape(std::int64_t m, std::int64_t n, std::int64_t k, kernels::DType in,
                  kernels::DType out) {
  return GemmProblem{
      .m = m, .n = n, .k = k, .lda = k, .ldb = n, .ldc = n, .in_type = in, .out_type = out};
}

// Device memory the plan's three blocks of slots take, as the pool counts them (size classes).
std::size_t device_bytes(const OutOfCorePlan& plan) {
  std::size_t total = 0;
  for (const std::size_t bytes : {static_cast<std::size_t>(plan.a_slots) * plan.a_slot_bytes,
                                  static_cast<std::size_t>(plan.b_slots) * plan.b_slot_bytes,
                                  static_cast<std::size_t>(plan.c_slots) * plan.c_slot_bytes}) {
    if (bytes > 0) total += MemoryPool::size_class(bytes);
  }
  return total;
}

// Bytes the plan's loads copy to the device (A' pieces and B' blocks).
std::size_t bytes_loaded(const OutOfCorePlan& plan, const GemmProblem& p) {
  std::size_t total = 0;
  for (const OutOfCoreStep& s : plan.steps) {
    const CBlock& a = plan.a_pieces[static_cast<std::size_t>(s.a_piece)];
    const CBlock& b = plan.b_blocks[static_cast<std::size_t>(s.b_block)];
    if (s.load_a) total += a_rows(p, a.row0, a.rows).packed_bytes();
    if (s.load_b) total += b_cols(p, b.col0, b.cols).packed_bytes();
  }
  return total;
}

// Replays the plan's loads in order: each tile must find its piece and block in its slots. And,
// with two slots or more of a kind, no load goes into a slot the previous tile reads, so that
// every copy can run while that tile computes.
void expect_slots_hold_what_tiles_read(const OutOfCorePlan& plan) {
  std::vector<int> a_in(static_cast<std::size_t>(plan.a_slots), -1);
  std::vector<int> b_in(static_cast<std::size_t>(plan.b_slots), -1);
  std::vector<int> a_loads(plan.a_pieces.size(), 0);
  const OutOfCoreStep* previous = nullptr;
  for (const OutOfCoreStep& s : plan.steps) {
    if (previous != nullptr && s.load_a && plan.a_slots > 1) {
      ASSERT_NE(s.a_slot, previous->a_slot) << "A' piece " << s.a_piece;
    }
    if (previous != nullptr && s.load_b && plan.b_slots > 1) {
      ASSERT_NE(s.b_slot, previous->b_slot) << "B' block " << s.b_block;
    }
    previous = &s;
    ASSERT_GE(s.a_slot, 0);
    ASSERT_LT(s.a_slot, plan.a_slots);
    ASSERT_GE(s.b_slot, 0);
    ASSERT_LT(s.b_slot, plan.b_slots);
    ASSERT_GE(s.c_slot, 0);
    ASSERT_LT(s.c_slot, plan.c_slots);
    if (s.load_a) {
      a_in[static_cast<std::size_t>(s.a_slot)] = s.a_piece;
      ++a_loads[static_cast<std::size_t>(s.a_piece)];
    }
    if (s.load_b) b_in[static_cast<std::size_t>(s.b_slot)] = s.b_block;
    ASSERT_EQ(a_in[static_cast<std::size_t>(s.a_slot)], s.a_piece);
    ASSERT_EQ(b_in[static_cast<std::size_t>(s.b_slot)], s.b_block);
  }
  for (int loads : a_loads) EXPECT_EQ(loads, 1);
}

std::vector<int> coverage(const OutOfCorePlan& plan, std::int64_t m, std::int64_t n) {
  std::vector<int> hits(static_cast<std::size_t>(m * n), 0);
  for (const OutOfCoreStep& s : plan.steps) {
    for (std::int64_t i = s.block.row0; i < s.block.row0 + s.block.rows; ++i) {
      for (std::int64_t j = s.block.col0; j < s.block.col0 + s.block.cols; ++j)
        ++hits[static_cast<std::size_t>(i * n + j)];
    }
  }
  return hits;
}

TEST(OutOfCorePlan, TilesCoverCOnceAndFindTheirPiecesInTheirSlots) {
  for (const auto [m, n, k] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1},
                               {1, 300, 7},
                               {300, 1, 7},
                               {257, 129, 65},
                               {1000, 999, 3},
                               {64, 640, 64}}) {
    for (std::int64_t budget : {std::int64_t{1} << 16, std::int64_t{1} << 18, std::int64_t{1} << 20,
                                std::int64_t{1} << 24}) {
      const GemmProblem p = shape(m, n, k, kernels::DType::kF32, kernels::DType::kF32);
      absl::StatusOr<OutOfCorePlan> plan = plan_out_of_core(p, budget, /*tile=*/128);
      if (!plan.ok()) {
        EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
        continue;
      }
      EXPECT_LE(device_bytes(*plan), static_cast<std::size_t>(budget));
      for (int hits : coverage(*plan, m, n)) ASSERT_EQ(hits, 1) << m << "x" << n << "x" << k;
      expect_slots_hold_what_tiles_read(*plan);
      for (const OutOfCoreStep& s : plan->steps) {
        EXPECT_LE(s.block.rows, 128);
        EXPECT_LE(s.block.cols, 128);
      }
    }
  }
}

TEST(OutOfCorePlan, AtSixteenGibAnFp32ProductOf65536HoldsFivePiecesAndReadsBTwice) {
  const GemmProblem p = shape(65536, 65536, 65536, kernels::DType::kF32, kernels::DType::kF32);
  absl::StatusOr<OutOfCorePlan> plan = plan_out_of_core(p, std::int64_t{16} << 30, 8192);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->a_pieces.size(), 8U);
  EXPECT_EQ(plan->b_blocks.size(), 8U);
  EXPECT_EQ(plan->a_slots, 5);  // 2 GiB a piece; 4 GiB of B' blocks and 512 MiB of C tiles beside
  EXPECT_LE(device_bytes(*plan), std::size_t{16} << 30);
  // A' once (16 GiB), B' once a panel (two panels) less the two blocks still in their slots at
  // the turn (2 GiB each).
  EXPECT_EQ(bytes_loaded(*plan, p), (std::size_t{16} + 32 - 4) << 30);
  expect_slots_hold_what_tiles_read(*plan);
}

TEST(OutOfCorePlan, AtSixteenGibABf16ProductOf65536KeepsAllOfAOnTheDevice) {
  const GemmProblem p = shape(65536, 65536, 65536, kernels::DType::kBF16, kernels::DType::kBF16);
  absl::StatusOr<OutOfCorePlan> plan = plan_out_of_core(p, std::int64_t{16} << 30, 8192);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->a_slots, 8);
  EXPECT_EQ(bytes_loaded(*plan, p), std::size_t{16} << 30);  // A' and B' once each
}

TEST(OutOfCorePlan, SmallerTilesBeforeOnePieceAPanel) {
  // At tile 256 one piece of 256 x 4096 fp32 (4 MiB) fits beside two blocks and two tiles, two do
  // not; at 128 two pieces do: the plan takes 128.
  const GemmProblem p = shape(1024, 1024, 4096, kernels::DType::kF32, kernels::DType::kF32);
  absl::StatusOr<OutOfCorePlan> plan = plan_out_of_core(p, std::int64_t{14} << 20, 256);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GE(plan->a_slots, 2);
  EXPECT_EQ(plan->a_pieces.front().rows, 128);
}

TEST(OutOfCorePlan, WhatCannotFitEvenTiledIsResourceExhausted) {
  const GemmProblem p =
      shape(1000, 1000, std::int64_t{1} << 24, kernels::DType::kF32, kernels::DType::kF32);
  absl::StatusOr<OutOfCorePlan> plan = plan_out_of_core(p, std::int64_t{64} << 20, 8192);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("--memory_budget_bytes"), std::string_view::npos);
  EXPECT_NE(plan.status().message().find("k = 16777216"), std::string_view::npos);
}

TEST(OutOfCorePlan, ProductFromSlotsEqualsTheWholeForEveryOperandOrder) {
  std::mt19937 rng(11);
  for (bool a_trans : {false, true}) {
    for (bool b_trans : {false, true}) {
      for (const auto [m, n, k] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1},
                                   {37, 11, 29},
                                   {3, 65, 19},
                                   {131, 97, 13}}) {
        for (std::int64_t budget : {std::int64_t{12} << 10, std::int64_t{1} << 20}) {
          const StridedProduct product = strided_product(m, n, k, a_trans, b_trans, rng);
          const GemmProblem& p = product.p;
          const std::vector<double>& c0 = product.c0;
          const std::vector<double> whole = kernels::reference_gemm_naive(p, c0.data());

          absl::StatusOr<OutOfCorePlan> plan = plan_out_of_core(p, budget, /*tile=*/16);
          ASSERT_TRUE(plan.ok()) << plan.status();
          std::vector<std::byte> a_slots(plan->a_slot_bytes *
                                         static_cast<std::size_t>(plan->a_slots));
          std::vector<std::byte> b_slots(plan->b_slot_bytes *
                                         static_cast<std::size_t>(plan->b_slots));
          std::vector<std::byte> c_slots(plan->c_slot_bytes *
                                         static_cast<std::size_t>(plan->c_slots));
          std::vector<double> c = c0;
          for (const OutOfCoreStep& s : plan->steps) {
            const CBlock& ap = plan->a_pieces[static_cast<std::size_t>(s.a_piece)];
            const CBlock& bp = plan->b_blocks[static_cast<std::size_t>(s.b_block)];
            std::byte* a_at =
                a_slots.data() + static_cast<std::size_t>(s.a_slot) * plan->a_slot_bytes;
            std::byte* b_at =
                b_slots.data() + static_cast<std::size_t>(s.b_slot) * plan->b_slot_bytes;
            std::byte* c_at =
                c_slots.data() + static_cast<std::size_t>(s.c_slot) * plan->c_slot_bytes;
            if (s.load_a) copy_strided(product.a.data(), a_rows(p, ap.row0, ap.rows), a_at);
            if (s.load_b) copy_strided(product.b.data(), b_cols(p, bp.col0, bp.cols), b_at);
            compute_packed_tile(p, s.block, a_at, b_at, c0, c_at, c);
          }
          ASSERT_TRUE(equals_whole(c, p.ldc, whole, m, n))
              << "a_trans " << a_trans << " b_trans " << b_trans << " " << m << "x" << n << "x" << k
              << " budget " << budget;
        }
      }
    }
  }
}

}  // namespace
}  // namespace matserve::server
