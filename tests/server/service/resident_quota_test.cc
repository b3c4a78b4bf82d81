// --max_resident_bytes_per_owner on every way a resident matrix is made: Upload, UploadStream
// (counted from its header on), keep_result of Multiply, MultiplyBatched (every product) and
// Transpose, and the in-place transpose (which makes nothing new). The real MatrixServiceImpl over
// the CPU backend, its handlers called directly; the expected bytes are counted here by hand.
#include <grpcpp/server_context.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/runtime/cpu_backend.h"
#include "server/runtime/runtime.h"
#include "server/service/auth.h"
#include "server/service/matrix_service.h"

namespace matserve::server {
namespace {

// 32 x 32 fp32 is 4096 bytes, one pool size class: the quota holds exactly four such matrices.
constexpr std::int64_t kSide = 32;
constexpr std::int64_t kMatrixBytes = kSide * kSide * 4;
constexpr std::int64_t kQuota = 4 * kMatrixBytes;

v1::Matrix square(float value = 1.0f) {
  v1::Matrix m;
  m.set_rows(kSide);
  m.set_cols(kSide);
  m.set_dtype(v1::FP32);
  std::vector<float> data(static_cast<std::size_t>(kSide * kSide), value);
  m.set_data(data.data(), data.size() * sizeof(float));
  return m;
}

// An UploadStream's chunks as a client sends them; `between` runs once the header has been read
// and before the data chunk is handed over (the upload is then in progress).
class ChunkReader final : public grpc::ServerReaderInterface<v1::UploadChunk> {
 public:
  ChunkReader(std::vector<v1::UploadChunk> chunks, std::function<void()> between)
      : chunks_(std::move(chunks)), between_(std::move(between)) {}
  void SendInitialMetadata() override {}
  bool NextMessageSize(std::uint32_t* size) override {
    if (next_ == chunks_.size()) return false;
    *size = static_cast<std::uint32_t>(chunks_[next_].ByteSizeLong());
    return true;
  }
  bool Read(v1::UploadChunk* chunk) override {
    if (next_ == chunks_.size()) return false;
    if (next_ == 1 && between_) between_();
    *chunk = chunks_[next_++];
    return true;
  }

 private:
  std::vector<v1::UploadChunk> chunks_;
  std::function<void()> between_;
  std::size_t next_ = 0;
};

class ResidentQuota : public ::testing::Test {
 protected:
  ResidentQuota()
      : runtime_(std::make_unique<CpuBackend>(CpuBackendOptions{
                     .concurrency = 1, .memory_budget_bytes = 1 << 24, .max_queue = 8}),
                 TunedChoice{}, absl::Hours(1)),
        service_(runtime_, metrics_, limits(), auth_) {}

  static const ServiceLimits& limits() {
    static const ServiceLimits l = [] {
      ServiceLimits x;
      x.max_resident_bytes_per_owner = kQuota;
      return x;
    }();
    return l;
  }

  // A handle, or "" with the call's status in `status`.
  std::string upload(grpc::Status* status = nullptr) {
    grpc::ServerContext ctx;
    v1::UploadRequest req;
    *req.mutable_matrix() = square();
    v1::UploadReply reply;
    const grpc::Status s = service_.Upload(&ctx, &req, &reply);
    if (status != nullptr) *status = s;
    return reply.resident().handle();
  }

  grpc::Status upload_stream(std::function<void()> between, v1::UploadReply* reply) {
    std::vector<v1::UploadChunk> chunks(2);
    v1::Matrix m = square();
    chunks[1].set_data(m.data());
    m.clear_data();
    *chunks[0].mutable_header() = m;
    ChunkReader reader(std::move(chunks), std::move(between));
    grpc::ServerContext ctx;
    return service_.upload_stream(&ctx, &reader, reply);
  }

  grpc::Status multiply_keep(const std::string& a, const std::string& b, v1::MultiplyReply* reply) {
    grpc::ServerContext ctx;
    v1::MultiplyRequest req;
    req.set_a_handle(a);
    req.set_b_handle(b);
    req.set_keep_result(true);
    return service_.Multiply(&ctx, &req, reply);
  }

  grpc::Status batched_keep(const std::string& a, int products, v1::MultiplyBatchedReply* reply) {
    grpc::ServerContext ctx;
    v1::MultiplyBatchedRequest req;
    req.set_batch(products);
    req.add_a_handles(a);
    *req.mutable_b() = square(0.5f);
    req.set_keep_result(true);
    return service_.MultiplyBatched(&ctx, &req, reply);
  }

  grpc::Status transpose(const std::string& a, bool in_place, v1::TransposeReply* reply) {
    grpc::ServerContext ctx;
    v1::TransposeRequest req;
    req.set_a_handle(a);
    req.set_keep_result(!in_place);
    req.set_in_place(in_place);
    return service_.Transpose(&ctx, &req, reply);
  }

  v1::ListResidentReply listed() {
    grpc::ServerContext ctx;
    v1::ListResidentRequest req;
    v1::ListResidentReply reply;
    EXPECT_TRUE(service_.ListResident(&ctx, &req, &reply).ok());
    return reply;
  }

  static void expect_over_quota(const grpc::Status& s) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find("--max_resident_bytes_per_owner"), std::string::npos)
        << s.error_message();
  }

  Runtime runtime_;
  Metrics metrics_{BuildInfo{"test", "test", "none", "cpu"}};
  Authenticator auth_;  // off: every caller is the owner ""
  MatrixServiceImpl service_;
};

TEST_F(ResidentQuota, UploadStopsAtTheQuotaAndReleaseGivesItBack) {
  std::vector<std::string> handles;
  for (int i = 0; i < 4; ++i) {
    grpc::Status s;
    handles.push_back(upload(&s));
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  grpc::Status s;
  EXPECT_EQ(upload(&s), "");
  expect_over_quota(s);
  EXPECT_EQ(listed().total_bytes(), kQuota);
  grpc::ServerContext ctx;
  v1::ReleaseRequest release;
  release.set_handle(handles[0]);
  v1::ReleaseReply released;
  ASSERT_TRUE(service_.Release(&ctx, &release, &released).ok());
  upload(&s);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// A stream's bytes count from its header on: while it is in progress the quota has room for one
// matrix fewer, and once it is published it counts as held.
TEST_F(ResidentQuota, UploadStreamCountsFromItsHeaderOn) {
  for (int i = 0; i < 3; ++i) ASSERT_NE(upload(), "");
  grpc::Status during;
  v1::UploadReply reply;
  const grpc::Status s = upload_stream([&] { upload(&during); }, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(reply.resident().handle(), "");
  expect_over_quota(during);
  EXPECT_EQ(listed().matrices_size(), 4);
  v1::UploadReply refused;
  expect_over_quota(upload_stream(nullptr, &refused));
  EXPECT_EQ(listed().total_bytes(), kQuota);
}

TEST_F(ResidentQuota, KeptMultiplyResultsCount) {
  const std::string a = upload();
  const std::string b = upload();
  for (int i = 0; i < 2; ++i) {
    v1::MultiplyReply reply;
    const grpc::Status s = multiply_keep(a, b, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(reply.result().bytes(), kMatrixBytes);
  }
  EXPECT_EQ(listed().total_bytes(), kQuota);
  v1::MultiplyReply reply;
  expect_over_quota(multiply_keep(a, b, &reply));
  EXPECT_EQ(listed().matrices_size(), 4);  // the refused call made nothing
}

// Every product of a kept batch counts: a batch that would pass the quota is refused whole.
TEST_F(ResidentQuota, KeptBatchResultsCountEveryProduct) {
  const std::string a = upload();
  v1::MultiplyBatchedReply too_many;
  expect_over_quota(batched_keep(a, 4, &too_many));
  EXPECT_EQ(listed().matrices_size(), 1);
  v1::MultiplyBatchedReply fits;
  const grpc::Status s = batched_keep(a, 3, &fits);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(fits.results_size(), 3);
  EXPECT_EQ(listed().total_bytes(), kQuota);
  v1::MultiplyBatchedReply one_more;
  expect_over_quota(batched_keep(a, 1, &one_more));
}

TEST_F(ResidentQuota, KeptTransposeResultsCount) {
  std::string a;
  for (int i = 0; i < 3; ++i) a = upload();
  v1::TransposeReply kept;
  const grpc::Status s = transpose(a, /*in_place=*/false, &kept);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(kept.result().handle(), a);
  EXPECT_EQ(listed().total_bytes(), kQuota);
  v1::TransposeReply refused;
  expect_over_quota(transpose(a, /*in_place=*/false, &refused));
}

// In place makes no new matrix: it runs with the quota full and leaves the bytes held as they were.
TEST_F(ResidentQuota, InPlaceTransposeTakesNothingMore) {
  std::string a;
  for (int i = 0; i < 4; ++i) a = upload();
  v1::TransposeReply reply;
  const grpc::Status s = transpose(a, /*in_place=*/true, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply.result().handle(), a);
  EXPECT_EQ(listed().total_bytes(), kQuota);
  EXPECT_EQ(listed().matrices_size(), 4);
}

}  // namespace
}  // namespace matserve::server
