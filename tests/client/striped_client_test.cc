// The C++ client's striped path against the fake service: operands above the threshold go as
// ranges over the stripes and the result comes back the same as inline; nothing is left
// resident; a server without ranged transfer gets the call inline; small calls stay inline; a
// call's bytes are cut so that every stripe gets a range; calls from several threads at once,
// sharing the client's stripes and starter threads, each get their own result.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/cpp/client.h"
#include "client/cpp/matrix.h"
#include "gtest/gtest.h"
#include "tests/client/fake_service.h"

namespace matserve::client {
namespace {

using kernels::DType;
using kernels::Layout;

v1::MultiplyRequest request_of(std::int64_t m, std::int64_t k, std::int64_t n) {
  v1::MultiplyRequest r;
  *r.mutable_a() = *matrix_from_npy(random_matrix(m, k, DType::kF32, Layout::kRowMajor, 1));
  *r.mutable_b() = *matrix_from_npy(random_matrix(k, n, DType::kF32, Layout::kColMajor, 2));
  return r;
}

std::unique_ptr<Client> connect(const std::string& target, int stripes, std::int64_t threshold) {
  ClientOptions options;
  options.stripes = stripes;
  options.stripe_threshold_bytes = threshold;
  options.stripe_chunk_bytes = 1000;  // many ranges, over every stripe
  absl::StatusOr<std::unique_ptr<Client>> c = Client::connect(target, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

TEST(StripedClient, OperandsAreCreatedAtOnceAndOnePlacedApartIsMadeAgainBesideTheFirst) {
  testing::FakeServer server;
  server.service().set_ranged(true);
  server.service().set_create_devices({"cuda:0", "cuda:1"});
  const std::unique_ptr<Client> striped = connect(server.target(), 2, 1);
  const std::unique_ptr<Client> inline_client = connect(server.target(), 0, 1);
  const v1::MultiplyRequest request = request_of(17, 31, 23);
  absl::StatusOr<v1::MultiplyReply> got = striped->multiply(request);
  ASSERT_TRUE(got.ok()) << got.status();
  // Two at once, one on each device; the second made again beside the first.
  EXPECT_EQ(server.service().create_resident_calls(), 3);
  const v1::MultiplyRequest& sent = server.service().last_multiply();
  EXPECT_EQ(server.service().device_of(sent.a_handle()),
            server.service().device_of(sent.b_handle()));
  EXPECT_EQ(server.service().resident_count(), 0u);
  absl::StatusOr<v1::MultiplyReply> want = inline_client->multiply(request);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(got->c().data(), want->c().data());
}

TEST(StripedClient, StripedResultsEqualInlineOnesAndNothingStays) {
  testing::FakeServer server;
  server.service().set_ranged(true);
  const std::unique_ptr<Client> striped = connect(server.target(), 3, 1);
  const std::unique_ptr<Client> inline_client = connect(server.target(), 0, 1);
  const v1::MultiplyRequest request = request_of(17, 31, 23);
  absl::StatusOr<v1::MultiplyReply> got = striped->multiply(request);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GE(server.service().write_range_calls(), 4);
  EXPECT_FALSE(server.service().last_multiply().a_handle().empty());
  EXPECT_TRUE(server.service().last_multiply().a().data().empty());
  EXPECT_FALSE(got->has_result());
  EXPECT_EQ(server.service().resident_count(), 0u);
  absl::StatusOr<v1::MultiplyReply> want = inline_client->multiply(request);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(got->c().data(), want->c().data());
  EXPECT_EQ(got->c().rows(), 17);
  EXPECT_EQ(got->c().cols(), 23);

  v1::TransposeRequest t;
  *t.mutable_a() = request.a();
  absl::StatusOr<v1::TransposeReply> tg = striped->transpose(t);
  absl::StatusOr<v1::TransposeReply> tw = inline_client->transpose(t);
  ASSERT_TRUE(tg.ok() && tw.ok()) << tg.status() << tw.status();
  EXPECT_EQ(tg->b().data(), tw->b().data());
  EXPECT_EQ(server.service().resident_count(), 0u);
}

// `count` random rows x cols fp32 matrices stacked batch-major in one Matrix.
v1::Matrix stack_of(std::int64_t count, std::int64_t rows, std::int64_t cols, Layout layout,
                    std::uint64_t seed) {
  v1::Matrix m = *matrix_from_npy(random_matrix(count * rows, cols, DType::kF32, layout, seed));
  m.set_rows(rows);
  m.set_batch(count);
  if (layout == Layout::kColMajor) {  // each product's matrix column-major, one after another
    m = *matrix_from_npy(random_matrix(rows, count * cols, DType::kF32, layout, seed));
    m.set_cols(cols);
    m.set_batch(count);
  }
  return m;
}

TEST(StripedClient, CallsFromManyThreadsAtOnceEachGetTheirOwnResult) {
  testing::FakeServer server;
  server.service().set_ranged(true);
  const std::unique_ptr<Client> striped = connect(server.target(), 3, 1);
  const std::unique_ptr<Client> inline_client = connect(server.target(), 0, 1);
  constexpr int kThreads = 8;
  constexpr int kCallsEach = 5;
  std::vector<v1::MultiplyRequest> requests;
  std::vector<std::string> wanted;
  for (int t = 0; t < kThreads; ++t) {
    requests.push_back(request_of(17 + t, 31, 23));  // a shape, and so a result, of its own
    absl::StatusOr<v1::MultiplyReply> want = inline_client->multiply(requests.back());
    ASSERT_TRUE(want.ok()) << want.status();
    wanted.push_back(want->c().data());
  }
  std::vector<int> right(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsEach; ++i) {
        absl::StatusOr<v1::MultiplyReply> got = striped->multiply(requests[t]);
        if (got.ok() && got->c().data() == wanted[t]) ++right[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(right[t], kCallsEach) << "thread " << t;
  EXPECT_EQ(server.service().resident_count(), 0u);
}

TEST(StripedClient, ABatchGoesAsOneStackedResidentPerOperandWithEveryOption) {
  testing::FakeServer server;
  server.service().set_ranged(true);
  const std::unique_ptr<Client> striped = connect(server.target(), 3, 1);
  const std::unique_ptr<Client> inline_client = connect(server.target(), 0, 1);
  for (const Layout layout : {Layout::kRowMajor, Layout::kColMajor}) {
    v1::MultiplyBatchedRequest request;
    request.set_batch(5);
    *request.mutable_a() = stack_of(5, 7, 3, layout, 1);
    *request.mutable_b() = stack_of(5, 3, 4, layout, 2);
    request.set_a_scale(0.5);  // forwarded as given (the fake does not check its use)
    request.set_b_scale(2.0);
    absl::StatusOr<v1::MultiplyBatchedReply> got = striped->multiply_batched(request);
    ASSERT_TRUE(got.ok()) << got.status();
    const v1::MultiplyBatchedRequest sent = server.service().last_multiply_batched();
    EXPECT_FALSE(sent.a_stacked().empty());
    EXPECT_FALSE(sent.b_stacked().empty());
    EXPECT_TRUE(sent.a_handles().empty() && !sent.has_a());
    EXPECT_TRUE(sent.keep_stacked());
    EXPECT_FALSE(sent.keep_result());
    EXPECT_EQ(sent.a_scale(), 0.5);
    EXPECT_EQ(sent.b_scale(), 2.0);
    EXPECT_EQ(got->results_size(), 0);
    EXPECT_EQ(server.service().resident_count(), 0u);
    absl::StatusOr<v1::MultiplyBatchedReply> want = inline_client->multiply_batched(request);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->c().data(), want->c().data());

    // Kept stacked for the caller: one resident matrix, left on the server.
    request.set_keep_stacked(true);
    absl::StatusOr<v1::MultiplyBatchedReply> kept = striped->multiply_batched(request);
    ASSERT_TRUE(kept.ok()) << kept.status();
    ASSERT_EQ(kept->results_size(), 1);
    EXPECT_EQ(server.service().resident_count(), 1u);
    EXPECT_TRUE(striped->release(kept->results(0).handle()).ok());
    EXPECT_EQ(server.service().resident_count(), 0u);
  }
}

TEST(StripedClient, KeepResultLeavesOnlyTheResult) {
  testing::FakeServer server;
  server.service().set_ranged(true);
  const std::unique_ptr<Client> striped = connect(server.target(), 2, 1);
  v1::MultiplyRequest request = request_of(5, 6, 7);
  request.set_keep_result(true);
  absl::StatusOr<v1::MultiplyReply> got = striped->multiply(request);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_result());
  EXPECT_EQ(server.service().resident_count(), 1u);  // the operands went, the result stays
  EXPECT_TRUE(striped->release(got->result().handle()).ok());
}

TEST(StripedClient, AServerWithoutRangesGetsTheCallInline) {
  testing::FakeServer server;  // ranged transfer off: CreateResident is UNIMPLEMENTED
  const std::unique_ptr<Client> striped = connect(server.target(), 4, 1);
  absl::StatusOr<v1::MultiplyReply> got = striped->multiply(request_of(3, 4, 5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(server.service().last_multiply().a().data().size(), 3u * 4 * 4);
  EXPECT_EQ(got->c().data().size(), 3u * 5 * 4);
}

TEST(StripedClient, CallsBelowTheThresholdStayInline) {
  testing::FakeServer server;
  server.service().set_ranged(true);
  const std::unique_ptr<Client> striped = connect(server.target(), 4, 10000);
  ASSERT_TRUE(striped->multiply(request_of(10, 10, 10)).ok());  // 800 bytes of operands
  EXPECT_EQ(server.service().write_range_calls(), 0);
  EXPECT_FALSE(server.service().last_multiply().a().data().empty());
  ASSERT_TRUE(striped->multiply(request_of(40, 40, 40)).ok());  // 12800 bytes
  EXPECT_GT(server.service().write_range_calls(), 0);
}

TEST(StripedClient, ACallsBytesAreCutSoThatEveryStripeGetsARangeDownTo256KiB) {
  testing::FakeServer server;
  server.service().set_ranged(true);
  ClientOptions options;
  options.stripes = 4;
  options.stripe_threshold_bytes = 1;  // ranges of at most the default 2 MiB
  absl::StatusOr<std::unique_ptr<Client>> c = Client::connect(server.target(), options);
  ASSERT_TRUE(c.ok()) << c.status();
  // 2 MiB of operands over 4 stripes: ranges of 512 KiB, two per operand (one each at 2 MiB).
  ASSERT_TRUE((*c)->multiply(request_of(512, 512, 512)).ok());
  EXPECT_EQ(server.service().write_range_calls(), 4);
  // 32 KiB of operands: not cut below 256 KiB, one range per operand.
  ASSERT_TRUE((*c)->multiply(request_of(64, 64, 64)).ok());
  EXPECT_EQ(server.service().write_range_calls(), 6);
  EXPECT_EQ(server.service().resident_count(), 0u);
}

}  // namespace
}  // namespace matserve::client
