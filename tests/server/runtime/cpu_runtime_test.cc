// The Runtime over the CPU backend: inline and resident operands, results kept resident, in-place
// transposes, verification, pool reuse after warm-up, and admission under a memory budget.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "kernels/cpu/reference.h"
#include "server/runtime/cpu_backend.h"
#include "server/runtime/runtime.h"
#include "tests/support/gemm_bound.h"
#include "tests/support/precision_probe.h"
#include "tests/support/random_matrix.h"

namespace matserve::server {
namespace {

using kernels::DType;

struct Fixture {
  explicit Fixture(std::int64_t budget = 1 << 30, int concurrency = 2)
      : runtime(std::make_unique<CpuBackend>(CpuBackendOptions{
                    .concurrency = concurrency, .memory_budget_bytes = budget, .max_queue = 64}),
                TunedChoice{}, absl::Minutes(5)) {}
  Runtime runtime;
};

Operand inline_operand(const std::vector<std::byte>& bytes, std::int64_t rows, std::int64_t cols) {
  Operand o;
  o.rows = rows;
  o.cols = cols;
  o.dtype = DType::kF32;
  o.data = bytes;
  return o;
}

Operand resident_operand(const std::shared_ptr<ResidentMatrix>& m) {
  Operand o;
  o.rows = m->rows;
  o.cols = m->cols;
  o.dtype = m->dtype;
  o.layout = m->layout;
  o.resident = m;
  return o;
}

Waiter soon() {
  return Waiter{absl::Now() + absl::Seconds(30), {}};
}

TEST(CpuRuntime, ResidentOperandsAndResidentResultMatchInline) {
  Fixture f;
  const auto a = testing::random_matrix(37 * 23, DType::kF32, 1);
  const auto b = testing::random_matrix(23 * 41, DType::kF32, 2);
  GemmJob inline_job;
  inline_job.a = inline_operand(a, 37, 23);
  inline_job.b = inline_operand(b, 23, 41);
  inline_job.verify = true;
  std::vector<std::byte> want(inline_job.out_bytes());
  Outcome o1;
  ASSERT_TRUE(f.runtime.multiply(inline_job, "auto", want, soon(), o1).ok());
  ASSERT_TRUE(o1.verification.has_value());
  EXPECT_LT(o1.verification->rel_l2_error, 1e-6);  // the server's own figure
  kernels::GemmProblem p;  // the same product, checked here element by element
  p.m = 37, p.n = 41, p.k = 23;
  p.lda = 23, p.ldb = 41, p.ldc = 41;
  p.a = a.data(), p.b = b.data();
  const testing::GemmCheck e = testing::check_gemm(
      p, want.data(), 41, kernels::reference_gemm(p, nullptr), testing::gemm_magnitude(p, nullptr));
  EXPECT_TRUE(e.ok()) << e.summary();

  auto ra = f.runtime.upload(inline_job.a, "", -1, soon());
  auto rb = f.runtime.upload(inline_job.b, "", -1, soon());
  ASSERT_TRUE(ra.ok() && rb.ok());
  GemmJob job;
  job.a = resident_operand(*ra);
  job.b = resident_operand(*rb);
  job.keep_result = true;
  job.verify = true;
  Outcome o2;
  ASSERT_TRUE(f.runtime.multiply(job, "auto", {}, soon(), o2).ok());
  ASSERT_NE(o2.result, nullptr);
  EXPECT_LT(o2.verification->rel_l2_error, 1e-6);
  std::vector<std::byte> got(job.out_bytes());
  ASSERT_TRUE(f.runtime.read(*o2.result, 0, got, soon()).ok());
  EXPECT_EQ(got, want);  // same kernel, same data: bit-identical
}

// fp32 data with a reduced compute precision through the Runtime: each probe value comes out as
// the requested format rounds it (fp16, bf16 and tf32 told apart; precision_probe.h).
TEST(CpuRuntime, ComputePrecisionRoundsAsItsFormat) {
  Fixture f;
  const auto& probe = testing::precision_probe();
  const auto rows = static_cast<std::int64_t>(probe.size());
  std::vector<std::byte> a(probe.size() * sizeof(float));
  for (std::size_t i = 0; i < probe.size(); ++i) {
    std::memcpy(&a[i * sizeof(float)], &probe[i].in, sizeof(float));
  }
  const float one = 1.0f;
  std::vector<std::byte> b(sizeof(float));
  std::memcpy(b.data(), &one, sizeof(float));
  for (kernels::Precision prec : {kernels::Precision::kF32, kernels::Precision::kTF32,
                                  kernels::Precision::kF16, kernels::Precision::kBF16}) {
    GemmJob job;
    job.a = inline_operand(a, rows, 1);
    job.b = inline_operand(b, 1, 1);
    job.precision = prec;
    std::vector<std::byte> out(job.out_bytes());
    testing::poison(out.data(), out.size());
    Outcome o;
    ASSERT_TRUE(f.runtime.multiply(job, "auto", out, soon(), o).ok());
    for (std::size_t i = 0; i < probe.size(); ++i) {
      float got = 0.0f;
      std::memcpy(&got, &out[i * sizeof(float)], sizeof(float));
      EXPECT_EQ(got, testing::probe_expected(probe[i], prec))
          << kernels::precision_name(prec) << " probe " << i;
    }
  }
}

// float (row-major) at index i of raw fp32 bytes.
float f32_at(std::span<const std::byte> bytes, std::size_t i) {
  float v = 0.0f;
  std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof(float));
  return v;
}

// A batch whose products each read their own A and C (B broadcast), with alpha and beta: every
// product equals alpha A_z B + beta C_z, computed here by a plain triple loop. The operands sit
// evenly spaced in one buffer (a strided batch) or in buffers of their own (pointer arrays).
TEST(CpuRuntime, BatchedProductsReadTheirOwnOperandsAndC) {
  constexpr std::int64_t kM = 5, kN = 4, kK = 3, kCount = 3;
  constexpr std::size_t kA = kM * kK * 4, kC = kM * kN * 4;
  Fixture f;
  const auto b = testing::random_matrix(kK * kN, DType::kF32, 20);
  for (const bool separate : {false, true}) {
    const auto all_a = testing::random_matrix(kM * kK * kCount, DType::kF32, separate ? 21 : 22);
    const auto all_c = testing::random_matrix(kM * kN * kCount, DType::kF32, separate ? 23 : 24);
    std::vector<std::vector<std::byte>> own_a, own_c;  // pointer arrays: one buffer each
    GemmBatchJob job;
    job.count = kCount;
    job.shape.alpha = 0.5;
    job.shape.beta = 2.0;
    job.b = {inline_operand(b, kK, kN)};
    for (std::int64_t z = 0; z < kCount; ++z) {
      std::span<const std::byte> a_z(all_a.data() + z * kA, kA);
      std::span<const std::byte> c_z(all_c.data() + z * kC, kC);
      if (separate) {
        own_a.emplace_back(a_z.begin(), a_z.end());
        own_c.emplace_back(c_z.begin(), c_z.end());
        a_z = own_a.back();
        c_z = own_c.back();
      }
      Operand a_op = inline_operand(all_a, kM, kK);
      a_op.data = a_z;
      Operand c_op = inline_operand(all_c, kM, kN);
      c_op.data = c_z;
      job.a.push_back(a_op);
      job.c.push_back(c_op);
    }
    job.shape.a = job.a[0];
    job.shape.b = job.b[0];
    job.shape.has_c = true;
    std::vector<std::byte> out(kC * kCount);
    testing::poison(out.data(), out.size());
    job.outs = {out};
    Outcome o;
    ASSERT_TRUE(f.runtime.multiply_batch(job, "auto", soon(), o).ok());
    for (std::int64_t z = 0; z < kCount; ++z) {
      for (std::int64_t i = 0; i < kM; ++i) {
        for (std::int64_t j = 0; j < kN; ++j) {
          double want = 2.0 * f32_at(all_c, static_cast<std::size_t>(z * kM * kN + i * kN + j));
          for (std::int64_t q = 0; q < kK; ++q) {
            want += 0.5 * f32_at(all_a, static_cast<std::size_t>(z * kM * kK + i * kK + q)) *
                    f32_at(b, static_cast<std::size_t>(q * kN + j));
          }
          const float got = f32_at(out, static_cast<std::size_t>(z * kM * kN + i * kN + j));
          EXPECT_NEAR(got, want, 1e-5) << (separate ? "pointer arrays" : "strided") << " product "
                                       << z << " (" << i << ", " << j << ")";
        }
      }
    }
  }
}

// Results kept one each or stacked in one resident matrix (keep_stacked): product i's result at
// its own place either way, against products computed here.
TEST(CpuRuntime, BatchResultsKeptOneEachOrStackedInOne) {
  constexpr std::int64_t kM = 5, kN = 4, kK = 3, kCount = 3;
  constexpr std::size_t kC = kM * kN * 4;
  Fixture f;
  const auto all_a = testing::random_matrix(kM * kK * kCount, DType::kF32, 31);
  const auto b = testing::random_matrix(kK * kN, DType::kF32, 32);
  for (const bool stacked : {false, true}) {
    GemmBatchJob job;
    job.count = kCount;
    job.keep_stacked = stacked;
    job.shape.keep_result = true;
    job.b = {inline_operand(b, kK, kN)};
    for (std::int64_t z = 0; z < kCount; ++z) {
      Operand a_op = inline_operand(all_a, kM, kK);
      a_op.data = std::span<const std::byte>(all_a).subspan(z * kM * kK * 4, kM * kK * 4);
      job.a.push_back(a_op);
    }
    job.shape.a = job.a[0];
    job.shape.b = job.b[0];
    Outcome o;
    ASSERT_TRUE(f.runtime.multiply_batch(job, "auto", soon(), o).ok());
    ASSERT_EQ(o.results.size(), stacked ? 1u : static_cast<std::size_t>(kCount));
    EXPECT_EQ(o.results[0]->rows, stacked ? kCount * kM : kM);
    EXPECT_EQ(o.results[0]->cols, kN);
    for (std::int64_t z = 0; z < kCount; ++z) {
      std::vector<std::byte> got(kC);
      ResidentMatrix& m = *o.results[stacked ? 0 : static_cast<std::size_t>(z)];
      ASSERT_TRUE(
          f.runtime.read(m, stacked ? static_cast<std::size_t>(z) * kC : 0, got, soon()).ok());
      for (std::int64_t i = 0; i < kM; ++i) {
        for (std::int64_t j = 0; j < kN; ++j) {
          double want = 0;
          for (std::int64_t q = 0; q < kK; ++q) {
            want += f32_at(all_a, static_cast<std::size_t>(z * kM * kK + i * kK + q)) *
                    f32_at(b, static_cast<std::size_t>(q * kN + j));
          }
          EXPECT_NEAR(f32_at(got, static_cast<std::size_t>(i * kN + j)), want, 1e-5)
              << (stacked ? "stacked" : "one each") << " product " << z;
        }
      }
    }
  }
}

TEST(CpuRuntime, InPlaceTransposeSwapsTheShape) {
  Fixture f;
  const auto a = testing::random_matrix(5 * 9, DType::kF32, 3);
  auto m = f.runtime.upload(inline_operand(a, 5, 9), "", -1, soon());
  ASSERT_TRUE(m.ok());
  TransposeJob job;
  job.a = resident_operand(*m);
  job.in_place = true;
  job.verify = true;
  job.locks.emplace_back(*m, /*exclusive=*/true);
  Outcome o;
  ASSERT_TRUE(f.runtime.transpose(job, "auto", {}, soon(), o).ok());
  EXPECT_EQ(o.variant, "cpu_inplace");
  EXPECT_EQ(o.verification->max_abs_error, 0.0);
  job.locks.clear();
  EXPECT_EQ((*m)->rows, 9);
  EXPECT_EQ((*m)->cols, 5);
  std::vector<std::byte> got(a.size());
  ASSERT_TRUE(f.runtime.read(**m, 0, got, soon()).ok());
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 9; ++j) {
      EXPECT_EQ(std::memcmp(&got[(j * 5 + i) * 4], &a[(i * 9 + j) * 4], 4), 0);
    }
  }
}

TEST(CpuRuntime, PoolHitRateIsFullAfterWarmUp) {
  Fixture f;
  const auto a = testing::random_matrix(64 * 64, DType::kF32, 4);
  for (int i = 0; i < 20; ++i) {
    TransposeJob job;
    job.a = inline_operand(a, 64, 64);
    job.keep_result = true;
    Outcome o;
    ASSERT_TRUE(f.runtime.transpose(job, "auto", {}, soon(), o).ok());
  }  // each result is dropped unpublished: its block returns to the pool
  const PoolStats s = f.runtime.backend().stats()[0].pool;
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.hits, 19);
  EXPECT_EQ(s.in_use_bytes, 0);
}

TEST(CpuRuntime, OverBudgetRequestIsRefusedWhileOthersProceed) {
  Fixture f(/*budget=*/1 << 20);
  const auto big = testing::random_matrix(1024 * 512, DType::kF32, 5);  // 2 MiB
  TransposeJob job;
  job.a = inline_operand(big, 1024, 512);
  job.keep_result = true;
  Outcome o;
  absl::Status s = f.runtime.transpose(job, "auto", {}, soon(), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("the budget is 1048576"), absl::string_view::npos) << s;
  const auto small = testing::random_matrix(64 * 64, DType::kF32, 6);
  TransposeJob ok;
  ok.a = inline_operand(small, 64, 64);
  ok.keep_result = true;
  EXPECT_TRUE(f.runtime.transpose(ok, "auto", {}, soon(), o).ok());
}

TEST(CpuRuntime, ExpiredDeadlineAllocatesNothing) {
  Fixture f;
  const auto a = testing::random_matrix(64 * 64, DType::kF32, 7);
  TransposeJob late;
  late.a = inline_operand(a, 64, 64);
  late.keep_result = true;
  Outcome o;
  absl::Status s =
      f.runtime.transpose(late, "auto", {}, Waiter{absl::Now() - absl::Seconds(1), {}}, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(f.runtime.backend().stats()[0].pool.in_use_bytes, 0);
  EXPECT_EQ(f.runtime.backend().stats()[0].pool.misses, 0);
  EXPECT_EQ(f.runtime.backend().stats()[0].scheduler.queued, 0);
}

}  // namespace
}  // namespace matserve::server
