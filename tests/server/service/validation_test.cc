// Request validation without a server: each bad-input class gets its code and a message naming
// the field; resident handles resolve, lock and carry their shape; valid requests become jobs.
#include "server/service/validation.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "server/service/proto_convert.h"

namespace matserve::server {
namespace {

v1::Matrix matrix(std::int64_t rows, std::int64_t cols, v1::DataType t = v1::FP32) {
  v1::Matrix m;
  m.set_rows(rows);
  m.set_cols(cols);
  m.set_dtype(t);
  const int size = t == v1::FP64 ? 8 : t == v1::FP32 ? 4 : 2;
  m.set_data(std::string(static_cast<std::size_t>(rows * cols * size), '\1'));
  return m;
}

// Resolves "r1" to a resident 3 x 4 fp32 matrix; everything else is NOT_FOUND.
struct Resolver {
  std::shared_ptr<ResidentMatrix> r1 = [] {
    auto m = std::make_shared<ResidentMatrix>();
    m->handle = "r1";
    m->rows = 3;
    m->cols = 4;
    return m;
  }();
  HandleResolver fn() {
    return [this](const std::string& field,
                  const std::string& h) -> absl::StatusOr<std::shared_ptr<ResidentMatrix>> {
      if (h == "r1") return r1;
      return absl::NotFoundError(field + ": no resident matrix '" + h + "'");
    };
  }
};

void expect_error(const absl::Status& s, absl::StatusCode code, const std::string& fragment) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(fragment), absl::string_view::npos) << s;
}

TEST(ValidateMultiply, ValidInlineRequestBecomesAJob) {
  Resolver r;
  v1::MultiplyRequest req;
  *req.mutable_a() = matrix(3, 4);
  *req.mutable_b() = matrix(5, 4);
  req.set_transpose_b(true);
  req.set_alpha(2.0);
  auto job = validate_multiply(req, ServiceLimits{}, r.fn());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->m(), 3);
  EXPECT_EQ(job->n(), 5);
  EXPECT_EQ(job->k(), 4);
  EXPECT_EQ(job->alpha, 2.0);
  EXPECT_EQ(job->beta, 0.0);
  EXPECT_EQ(job->a.data.size(), 48u);
}

// A batch's shape is what its products share: A's and B's shapes with no bytes (the bytes are
// each product's operands), whether there is a C, and the options; the resident operands' locks
// are held by it for the whole batch.
TEST(ValidateMultiplyBatched, TheShapeHoldsWhatTheProductsShareAndNoOperandBytes) {
  Resolver r;
  v1::MultiplyBatchedRequest req;
  req.set_batch(2);
  req.add_a_handles("r1");
  req.add_a_handles("r1");
  *req.mutable_b() = matrix(5, 4);
  *req.mutable_c() = matrix(3, 5);
  req.set_transpose_b(true);
  req.set_alpha(2.0);
  req.set_beta(0.5);
  req.set_keep_result(true);
  auto batch = validate_multiply_batched(req, ServiceLimits{}, r.fn());
  ASSERT_TRUE(batch.ok()) << batch.status();
  const GemmShape& shape = batch->shape;
  EXPECT_EQ(shape.m(), 3);
  EXPECT_EQ(shape.n(), 5);
  EXPECT_EQ(shape.k(), 4);
  EXPECT_EQ(shape.a.rows, 3);
  EXPECT_EQ(shape.b.rows, 5);
  EXPECT_TRUE(shape.a.data.empty());
  EXPECT_TRUE(shape.b.data.empty());
  EXPECT_TRUE(shape.has_c);
  EXPECT_TRUE(shape.transpose_b);
  EXPECT_EQ(shape.alpha, 2.0);
  EXPECT_EQ(shape.beta, 0.5);
  EXPECT_TRUE(shape.keep_result);
  EXPECT_EQ(shape.out_bytes(), 3u * 5u * 4u);
  EXPECT_FALSE(shape.locks.empty());
  EXPECT_EQ(batch->b[0].data.size(), 80u);  // the bytes stay with the operands
  ASSERT_EQ(batch->c.size(), 1u);
}

TEST(ValidateMultiply, AnInlineResultLargerThanOneReplyIsRefusedUpFront) {
  // An outer product whose inputs fit in one message but whose result does not: refused before
  // any work (it used to be computed, then dropped by gRPC); kept on the server it is fine.
  Resolver r;
  ServiceLimits limits;
  limits.max_message_bytes = 64 * 1024;
  v1::MultiplyRequest req;
  *req.mutable_a() = matrix(200, 1);
  *req.mutable_b() = matrix(1, 200);  // a 200 x 200 fp32 result: 160000 bytes
  expect_error(validate_multiply(req, limits, r.fn()).status(),
               absl::StatusCode::kResourceExhausted,
               "c (the result): 160000 bytes do not fit in one reply of at most 65536 bytes "
               "(--max_message_bytes): use keep_result, then DownloadStream");
  req.set_keep_result(true);
  EXPECT_TRUE(validate_multiply(req, limits, r.fn()).ok());
}

TEST(ValidateTranspose, AnInlineResultLargerThanOneReplyIsRefusedUpFront) {
  Resolver r;
  ServiceLimits limits;
  limits.max_message_bytes = 1024 + 40;  // room for 10 fp32 values and the reply's 1 KiB
  v1::TransposeRequest req;
  *req.mutable_a() = matrix(3, 4);  // 48 bytes
  expect_error(validate_transpose(req, limits, r.fn()).status(),
               absl::StatusCode::kResourceExhausted, "b (the result): 48 bytes do not fit");
  req.set_keep_result(true);
  EXPECT_TRUE(validate_transpose(req, limits, r.fn()).ok());
}

TEST(ValidateMultiply, ResidentOperandsCarryTheirShapeAndAreLocked) {
  Resolver r;
  v1::MultiplyRequest req;
  req.set_a_handle("r1");
  req.set_b_handle("r1");  // the same matrix twice: locked once
  req.set_transpose_b(true);
  auto job = validate_multiply(req, ServiceLimits{}, r.fn());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->a.is_resident());
  EXPECT_EQ(job->m(), 3);
  EXPECT_EQ(job->n(), 3);
  EXPECT_EQ(job->locks.size(), 1u);
  EXPECT_FALSE(r.r1->mu.WriterTryLock());  // shared lock held by the job
  job->locks.clear();
  EXPECT_TRUE(r.r1->mu.WriterTryLock());
  r.r1->mu.WriterUnlock();
}

TEST(ValidateMultiply, HandleErrors) {
  Resolver r;
  v1::MultiplyRequest req;
  req.set_a_handle("nope");
  *req.mutable_b() = matrix(4, 2);
  expect_error(validate_multiply(req, ServiceLimits{}, r.fn()).status(),
               absl::StatusCode::kNotFound, "a_handle");
  req.set_a_handle("r1");
  *req.mutable_a() = matrix(3, 4);
  expect_error(validate_multiply(req, ServiceLimits{}, r.fn()).status(),
               absl::StatusCode::kInvalidArgument, "a and a_handle: give one of them, not both");
  v1::MultiplyRequest none;
  expect_error(validate_multiply(none, ServiceLimits{}, r.fn()).status(),
               absl::StatusCode::kInvalidArgument, "a: missing");
}

TEST(ValidateMultiply, DimensionsAreCheckedBeforeAnyProductCanOverflow) {
  Resolver r;
  v1::MultiplyRequest req;
  req.mutable_a()->set_rows(std::int64_t{1} << 40);
  req.mutable_a()->set_cols(std::int64_t{1} << 40);
  req.mutable_a()->set_dtype(v1::FP64);
  *req.mutable_b() = matrix(2, 2);
  expect_error(validate_multiply(req, ServiceLimits{}, r.fn()).status(),
               absl::StatusCode::kInvalidArgument, "a.rows: 1099511627776 exceeds the limit");
}

// With a --max_dimension near 2^31, rows * cols * size overflows 64 bits: the size check must
// see the overflow, not a wrapped (small) product that an empty `data` would then match.
TEST(ValidateMultiply, SizeProductsThatOverflowAreRefused) {
  Resolver r;
  ServiceLimits limits;
  limits.max_dimension = std::int64_t{1} << 62;  // only check_limits keeps this out of a server
  v1::MultiplyRequest req;
  req.mutable_a()->set_rows(std::int64_t{1} << 32);
  req.mutable_a()->set_cols(std::int64_t{1} << 32);  // 2^64 elements: wraps to 0 bytes
  req.mutable_a()->set_dtype(v1::FP32);
  *req.mutable_b() = matrix(2, 2);
  expect_error(validate_multiply(req, limits, r.fn()).status(),
               absl::StatusCode::kResourceExhausted, "(over 2^63) bytes exceeds the limit");
  v1::Matrix header;
  header.set_rows(std::int64_t{1} << 40);
  header.set_cols(std::int64_t{1} << 23);  // 2^63 elements * 1 byte: one past INT64_MAX
  header.set_dtype(v1::FP8_E4M3);
  expect_error(validate_header("header", header, limits).status(),
               absl::StatusCode::kResourceExhausted, "--max_matrix_bytes");
  // The result's size: m x n (resident operands, so no bytes are needed here) with m and n
  // within the limit but m * n * 8 past 2^63.
  auto tall = std::make_shared<ResidentMatrix>();
  {
    absl::MutexLock lock(&tall->mu);
    tall->rows = std::int64_t{1} << 31;
    tall->cols = 1;
    tall->dtype = kernels::DType::kF64;
  }
  HandleResolver giant = [&](const std::string&, const std::string&) {
    return absl::StatusOr<std::shared_ptr<ResidentMatrix>>(tall);
  };
  v1::MultiplyRequest outer;
  outer.set_a_handle("t");
  outer.set_b_handle("t");
  outer.set_transpose_b(true);  // (2^31 x 1) * (1 x 2^31)
  limits.max_matrix_bytes = std::int64_t{1} << 62;
  expect_error(validate_multiply(outer, limits, giant).status(),
               absl::StatusCode::kResourceExhausted, "c (the result): 2147483648 * 2147483648 * 8");
}

TEST(ValidateMultiply, SizeLimitIsResourceExhausted) {
  Resolver r;
  ServiceLimits limits;
  limits.max_matrix_bytes = 1000;
  v1::MultiplyRequest req;
  *req.mutable_a() = matrix(20, 20);
  *req.mutable_b() = matrix(20, 20);
  expect_error(validate_multiply(req, limits, r.fn()).status(),
               absl::StatusCode::kResourceExhausted, "--max_matrix_bytes");
}

// `verify` runs a float64 reference on the server's CPU: a 16384^3 product (hours) is refused
// before anything runs, naming the limit; so is a reference that needs too much host memory.
TEST(ValidateMultiply, VerifyIsBoundedInFlopsAndMemory) {
  auto big = std::make_shared<ResidentMatrix>();
  {
    absl::MutexLock lock(&big->mu);
    big->rows = 16384;
    big->cols = 16384;
  }
  HandleResolver resolve = [&](const std::string&, const std::string&) {
    return absl::StatusOr<std::shared_ptr<ResidentMatrix>>(big);
  };
  v1::MultiplyRequest req;
  req.set_a_handle("big");
  req.set_b_handle("big");
  req.set_keep_result(true);  // 1 GiB of fp32: too large to return in a reply
  EXPECT_TRUE(validate_multiply(req, ServiceLimits{}, resolve).ok());  // without verify: fine
  req.set_verify(true);
  expect_error(validate_multiply(req, ServiceLimits{}, resolve).status(),
               absl::StatusCode::kInvalidArgument,
               "verify: the float64 reference of this 16384x16384x16384 product is 8.79609e+12 "
               "flops of server CPU, above the limit of 1.37439e+11 (--max_verify_flops)");

  Resolver r;
  v1::MultiplyRequest small;
  *small.mutable_a() = matrix(64, 64);
  *small.mutable_b() = matrix(64, 64);
  small.set_verify(true);
  auto job = validate_multiply(small, ServiceLimits{}, r.fn());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->verify_bytes, 8 * 3 * 64 * 64);  // A, B and C as doubles
  ServiceLimits tight;
  tight.max_verify_bytes = 8 * 3 * 64 * 64 - 1;
  expect_error(validate_multiply(small, tight, r.fn()).status(), absl::StatusCode::kInvalidArgument,
               "--max_verify_bytes");
  tight = ServiceLimits{};
  tight.max_verify_flops = 0;  // verify switched off
  expect_error(validate_multiply(small, tight, r.fn()).status(), absl::StatusCode::kInvalidArgument,
               "--max_verify_flops");
  // A resident operand is copied to the host for the reference: it counts.
  v1::MultiplyRequest mixed;
  mixed.set_a_handle("r1");  // 3 x 4 fp32
  *mixed.mutable_b() = matrix(4, 2);
  mixed.set_verify(true);
  job = validate_multiply(mixed, ServiceLimits{}, r.fn());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->verify_bytes, 8 * (3 * 4 + 4 * 2 + 3 * 2) + 3 * 4 * 4);
}

TEST(ValidateTranspose, VerifyIsBoundedInMemory) {
  Resolver r;
  v1::TransposeRequest req;
  *req.mutable_a() = matrix(100, 100);
  req.set_verify(true);
  ServiceLimits limits;
  limits.max_verify_bytes = 80000;
  auto job = validate_transpose(req, limits, r.fn());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->verify_bytes, 80000);
  limits.max_verify_bytes = 79999;
  expect_error(validate_transpose(req, limits, r.fn()).status(), absl::StatusCode::kInvalidArgument,
               "verify: the float64 reference needs 80000 bytes of server memory, above the limit "
               "of 79999 (--max_verify_bytes)");
  req.set_verify(false);
  EXPECT_TRUE(validate_transpose(req, limits, r.fn()).ok());
}

TEST(ValidateTranspose, InPlaceRules) {
  Resolver r;
  v1::TransposeRequest req;
  *req.mutable_a() = matrix(3, 4);
  req.set_in_place(true);
  expect_error(validate_transpose(req, ServiceLimits{}, r.fn()).status(),
               absl::StatusCode::kInvalidArgument, "in_place: needs a_handle");
  v1::TransposeRequest both;
  both.set_a_handle("r1");
  both.set_in_place(true);
  both.set_keep_result(true);
  expect_error(validate_transpose(both, ServiceLimits{}, r.fn()).status(),
               absl::StatusCode::kInvalidArgument, "keep_result");
  v1::TransposeRequest ok;
  ok.set_a_handle("r1");
  ok.set_in_place(true);
  auto job = validate_transpose(ok, ServiceLimits{}, r.fn());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(r.r1->mu.ReaderTryLock());  // exclusive lock held by the in-place job
}

TEST(ValidateHeader, StreamedHeaderNeedsNoData) {
  v1::Matrix h;
  h.set_rows(1000);
  h.set_cols(1000);
  h.set_dtype(v1::FP32);
  EXPECT_TRUE(validate_header("header", h, ServiceLimits{}).ok());
  EXPECT_FALSE(validate_matrix("matrix", h, ServiceLimits{}).ok());
  h.set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  expect_error(validate_header("header", h, ServiceLimits{}).status(),
               absl::StatusCode::kInvalidArgument, "header.dtype");
}

}  // namespace
}  // namespace matserve::server

namespace matserve::server {
namespace {

// The stored shapes of A (m x k as op(A)) and B (k x n as op(B)) in a transpose state.
v1::Matrix stored(std::int64_t rows, std::int64_t cols, bool transposed) {
  return transposed ? matrix(cols, rows) : matrix(rows, cols);
}

// In every transpose state, op(A) is 2 x 3 and op(B) 3 x 5 (all sizes distinct, so a check that
// reads the wrong dimension shows): accepted with m, n, k as op() gives them; an op(B) with 4
// rows is refused, and so is a B whose stored rows match k only when transpose_b is ignored.
TEST(ValidateMultiply, InnerDimensionsAreCheckedInEveryTransposeState) {
  Resolver r;
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    const std::string state = std::string("transpose_a=") + (ta ? "true" : "false") +
                              ", transpose_b=" + (tb ? "true" : "false");
    v1::MultiplyRequest req;
    *req.mutable_a() = stored(2, 3, ta);
    *req.mutable_b() = stored(3, 5, tb);
    req.set_transpose_a(ta);
    req.set_transpose_b(tb);
    auto job = validate_multiply(req, ServiceLimits{}, r.fn());
    ASSERT_TRUE(job.ok()) << state << ": " << job.status();
    EXPECT_EQ(job->m(), 2) << state;
    EXPECT_EQ(job->k(), 3) << state;
    EXPECT_EQ(job->n(), 5) << state;

    v1::MultiplyRequest wrong = req;
    *wrong.mutable_b() = stored(4, 5, tb);
    expect_error(validate_multiply(wrong, ServiceLimits{}, r.fn()).status(),
                 absl::StatusCode::kInvalidArgument, "b: inner dimensions do not agree");
    v1::MultiplyRequest ignored = req;  // agrees only read the other way round
    *ignored.mutable_b() = stored(3, 5, !tb);
    expect_error(validate_multiply(ignored, ServiceLimits{}, r.fn()).status(),
                 absl::StatusCode::kInvalidArgument, state);
    v1::MultiplyRequest a_ignored = req;
    *a_ignored.mutable_a() = stored(2, 3, !ta);
    expect_error(validate_multiply(a_ignored, ServiceLimits{}, r.fn()).status(),
                 absl::StatusCode::kInvalidArgument, "inner dimensions do not agree");

    v1::MultiplyBatchedRequest batched;
    batched.set_batch(2);
    *batched.mutable_a() = req.a();
    *batched.mutable_b() = ignored.b();
    batched.set_transpose_a(ta);
    batched.set_transpose_b(tb);
    expect_error(validate_multiply_batched(batched, ServiceLimits{}, r.fn()).status(),
                 absl::StatusCode::kInvalidArgument, "inner dimensions do not agree");
    *batched.mutable_b() = req.b();
    auto batch = validate_multiply_batched(batched, ServiceLimits{}, r.fn());
    ASSERT_TRUE(batch.ok()) << state << ": " << batch.status();
    EXPECT_EQ(batch->shape.k(), 3) << state;
    EXPECT_EQ(batch->shape.n(), 5) << state;
  }
}

}  // namespace
}  // namespace matserve::server

namespace matserve::server {
namespace {

// --max_dimension is inclusive: a side equal to it passes, one more is refused, naming the field.
TEST(ValidateMultiply, DimensionLimitIsInclusive) {
  Resolver r;
  ServiceLimits limits;
  limits.max_dimension = 8;
  v1::MultiplyRequest req;
  *req.mutable_a() = matrix(8, 2);
  *req.mutable_b() = matrix(2, 8);
  ASSERT_TRUE(validate_multiply(req, limits, r.fn()).ok());
  *req.mutable_a() = matrix(9, 2);
  expect_error(validate_multiply(req, limits, r.fn()).status(), absl::StatusCode::kInvalidArgument,
               "9 exceeds the limit of 8 (--max_dimension)");
  *req.mutable_a() = matrix(8, 2);
  *req.mutable_b() = matrix(2, 9);
  expect_error(validate_multiply(req, limits, r.fn()).status(), absl::StatusCode::kInvalidArgument,
               "9 exceeds the limit of 8 (--max_dimension)");
}

// Each wire data type is the kernels' type of the same name, both ways, and an inline operand of
// each is read as that type.
TEST(ProtoConvert, DataTypesMapOneToOne) {
  const std::pair<v1::DataType, kernels::DType> pairs[] = {{v1::FP64, kernels::DType::kF64},
                                                           {v1::FP32, kernels::DType::kF32},
                                                           {v1::FP16, kernels::DType::kF16},
                                                           {v1::BF16, kernels::DType::kBF16},
                                                           {v1::FP8_E4M3, kernels::DType::kF8E4M3}};
  for (const auto& [wire, kernel] : pairs) {
    EXPECT_EQ(from_proto(wire), kernel) << v1::DataType_Name(wire);
    EXPECT_EQ(to_proto(kernel), wire) << v1::DataType_Name(wire);
  }
  EXPECT_FALSE(from_proto(v1::DATA_TYPE_UNSPECIFIED).has_value());
  Resolver r;
  for (const auto& [wire, kernel] : pairs) {
    if (wire == v1::FP8_E4M3) continue;  // fp8 operands need compute=fp8
    v1::MultiplyRequest req;
    *req.mutable_a() = matrix(2, 3, wire);
    *req.mutable_b() = matrix(3, 2, wire);
    auto job = validate_multiply(req, ServiceLimits{}, r.fn());
    ASSERT_TRUE(job.ok()) << v1::DataType_Name(wire) << ": " << job.status();
    EXPECT_EQ(job->a.dtype, kernel) << v1::DataType_Name(wire);
    EXPECT_EQ(job->b.dtype, kernel) << v1::DataType_Name(wire);
  }
}

}  // namespace
}  // namespace matserve::server
