// matserve-bench's runner against the in-process FakeMatrixService: request counts, bytes per
// request, the dynamic-batching figures of the replies, and --batch N (one MultiplyBatched of N
// products per request: stacked inline operands, or N handles each, a request's N results released
// in one call), a --workload mix (each operation recorded apart, every timed request in the time
// series) and operands from files (sent as they were read).
#include "client/bench/runner.h"

#include <gtest/gtest.h>

#include <memory>

#include "client/bench/report.h"
#include "tests/client/fake_service.h"

namespace matserve::client::bench {
namespace {

constexpr std::int64_t kRequests = 12;
constexpr int kWorkers = 2;
const Shape kShape{6, 5, 4};  // C 6 x 5 = A 6 x 4 * B 4 x 5

class BenchRunner : public ::testing::Test {
 protected:
  // kRequests timed requests of kShape (fp32) from kWorkers workers sharing one client, each
  // worker warmed up by one request.
  RunResult run(Mode mode, std::int64_t batch, const FileOperands* files = nullptr) {
    options_.target = server_.target();
    options_.requests = kRequests;
    options_.duration_s.reset();
    options_.warmup = 1;
    options_.batch = batch;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::connect(options_.target);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return {};
    const RunContext context{options_, client->get(), false, "test", files};
    return run_one(context, RunSpec{kShape, mode, "auto", "fp32", kWorkers, batch});
  }

  testing::FakeServer server_;
  BenchOptions options_;
};

TEST_F(BenchRunner, PlainMultipliesRecordWhatDynamicBatchingReported) {
  const RunResult result = run(Mode::kInline, 1);
  EXPECT_EQ(result.record.ok(), kRequests);
  EXPECT_EQ(result.record.errors(), 0);
  EXPECT_EQ(server_.service().multiply_calls(), kRequests + kWorkers);
  EXPECT_EQ(server_.service().multiply_batched_calls(), 0);
  EXPECT_EQ(result.bytes_sent_per_request, (6 * 4 + 4 * 5) * 4);
  EXPECT_EQ(result.bytes_received_per_request, 6 * 5 * 4);
  // The fake reports every Multiply merged with one other (kernel 100 us, batch wait 0.75 us): the
  // shared launch's kernel time counts once toward the device-busy sum.
  EXPECT_EQ(result.record.merged_requests, std::vector<double>(kRequests, 2.0));
  EXPECT_EQ(result.record.batch_wait_us, std::vector<double>(kRequests, 0.75));
  EXPECT_DOUBLE_EQ(result.record.kernel_us_sum, kRequests * 100.0 / 2);
  const RunReport report = make_report(result, 1);
  EXPECT_DOUBLE_EQ(report.merged_requests.mean, 2.0);
  EXPECT_DOUBLE_EQ(report.matrices_per_s, report.ok_per_s);
}

TEST_F(BenchRunner, InlineBatchSendsStackedOperands) {
  const RunResult result = run(Mode::kInline, 3);
  EXPECT_EQ(result.record.ok(), kRequests);
  EXPECT_EQ(result.record.errors(), 0) << result.record.first_error;
  EXPECT_EQ(server_.service().multiply_batched_calls(), kRequests + kWorkers);
  EXPECT_EQ(server_.service().multiply_calls(), 0);
  const v1::MultiplyBatchedRequest sent = server_.service().last_multiply_batched();
  EXPECT_EQ(sent.batch(), 3);
  EXPECT_EQ(sent.a().batch(), 3);
  EXPECT_EQ(sent.a().rows(), 6);
  EXPECT_EQ(sent.a().cols(), 4);
  EXPECT_EQ(sent.b().batch(), 3);
  EXPECT_EQ(sent.b().rows(), 4);
  EXPECT_EQ(sent.b().cols(), 5);
  EXPECT_FALSE(sent.keep_result());
  EXPECT_EQ(result.bytes_sent_per_request, 3 * (6 * 4 + 4 * 5) * 4);
  EXPECT_EQ(result.bytes_received_per_request, 3 * 6 * 5 * 4);
  EXPECT_EQ(result.record.merged_requests, std::vector<double>(kRequests, 1.0));
  const RunReport report = make_report(result, 1);
  EXPECT_EQ(report.spec.batch, 3);
  EXPECT_DOUBLE_EQ(report.matrices_per_s, 3 * report.ok_per_s);
  EXPECT_DOUBLE_EQ(report.gflops_per_s, report.ok_per_s * 3 * 2 * 6 * 5 * 4 / 1e9);
}

TEST_F(BenchRunner, ResidentBatchUploadsOnceAndReleasesEveryResult) {
  using Release = BenchOptions::Release;
  for (const Release release :
       {Release::kBackground, Release::kInline, Release::kDeferred, Release::kNextCall}) {
    SCOPED_TRACE(static_cast<int>(release));
    options_.release = release;
    const RunResult result = run(Mode::kResident, 3);
    EXPECT_EQ(result.record.ok(), kRequests);
    EXPECT_EQ(result.record.errors(), 0) << result.record.first_error;
    const v1::MultiplyBatchedRequest sent = server_.service().last_multiply_batched();
    EXPECT_EQ(sent.a_handles_size(), 3);
    EXPECT_EQ(sent.b_handles_size(), 3);
    EXPECT_FALSE(sent.has_a());
    EXPECT_TRUE(sent.keep_result());
    EXPECT_EQ(result.bytes_sent_per_request, 0);
    // A timed request's three results go in one Release call, outside the timed call (the pool
    // may carry several requests' results in one call; warm-up results are released too); the
    // operands are released at the end: nothing is left.
    if (release == Release::kInline) {
      EXPECT_EQ(result.record.release_us.size(), static_cast<std::size_t>(kRequests));
    } else if (release == Release::kNextCall) {
      // Each call releases the results of the one before; one Release per worker at the end.
      EXPECT_GE(result.record.release_us.size(), 1u);
      EXPECT_LE(result.record.release_us.size(), static_cast<std::size_t>(kWorkers));
      EXPECT_EQ(sent.release_handles_size(), 3);
    } else if (release == Release::kDeferred) {
      // 36 results are under the 256 a worker holds before it releases: one call each, at the end.
      EXPECT_GE(result.record.release_us.size(), 1u);
      EXPECT_LE(result.record.release_us.size(), static_cast<std::size_t>(kWorkers));
    } else {
      EXPECT_GE(result.record.release_us.size(), 1u);
      EXPECT_LE(result.record.release_us.size(), static_cast<std::size_t>(kRequests + kWorkers));
    }
    EXPECT_EQ(result.record.release_errors, 0);
    EXPECT_EQ(server_.service().resident_count(), 0u);
  }
}

TEST_F(BenchRunner, DeferredReleaseCallsWhenAWorkerHoldsEnoughResults) {
  options_.release = BenchOptions::Release::kDeferred;
  options_.deferred_release_handles = 4;
  const RunResult by_count = run(Mode::kResident, 1);
  EXPECT_EQ(by_count.record.ok(), kRequests);
  // 12 results over two workers, a call at every 4th a worker holds and one at the end for the
  // rest: 3 calls (8 + 4 or 12 + 0) or 4 (the other splits).
  EXPECT_GE(by_count.record.release_us.size(), 3u);
  EXPECT_LE(by_count.record.release_us.size(), 4u);
  EXPECT_EQ(by_count.record.release_errors, 0);
  EXPECT_EQ(server_.service().resident_count(), 0u);

  options_.deferred_release_handles = 256;
  options_.deferred_release_bytes = 6 * 5 * 8;  // the bound on one 6 x 5 result: every call
  const RunResult by_bytes = run(Mode::kResident, 1);
  EXPECT_EQ(by_bytes.record.release_us.size(), static_cast<std::size_t>(kRequests));
  EXPECT_EQ(server_.service().resident_count(), 0u);
}

TEST_F(BenchRunner, AMixedWorkloadRecordsEachOperationAndReleasesEverything) {
  options_.workload = *parse_workload("multiply=1,transpose=1");
  const RunResult result = run(Mode::kResident, 1);
  EXPECT_EQ(result.record.ok(), kRequests) << result.record.first_error;
  ASSERT_EQ(result.record.ops.size(), 2u);
  const OpRecord& multiply = result.record.ops.at("multiply");
  const OpRecord& transpose = result.record.ops.at("transpose");
  EXPECT_EQ(multiply.ok() + transpose.ok(), kRequests);
  EXPECT_EQ(multiply.errors + transpose.errors, 0);
  EXPECT_EQ(result.record.completions.size(), static_cast<std::size_t>(kRequests));
  EXPECT_EQ(result.workload, "multiply=1,transpose=1");
  const RunReport report = make_report(result, 1);
  ASSERT_EQ(report.ops.size(), 2u);
  EXPECT_EQ(report.ops[1].name, "transpose");
  EXPECT_EQ(report.ops[1].ok, transpose.ok());
  // Products are the multiplies only.
  EXPECT_NEAR(report.matrices_per_s, static_cast<double>(multiply.ok()) / result.wall_s, 1e-6);
  EXPECT_EQ(server_.service().resident_count(), 0u);
}

TEST_F(BenchRunner, FileOperandsAreSentAsTheyWereRead) {
  FileOperands files;
  files.a = random_operand(6, 4, 1, DType::kF64, 99);
  files.b = random_operand(4, 5, 1, DType::kF64, 98);
  files.has_b = true;
  files.shape = kShape;
  const RunResult result = run(Mode::kInline, 1, &files);
  EXPECT_EQ(result.record.ok(), kRequests) << result.record.first_error;
  const v1::MultiplyRequest sent = server_.service().last_multiply();
  EXPECT_EQ(sent.a().data(), files.a.data());
  EXPECT_EQ(sent.b().data(), files.b.data());
  EXPECT_EQ(sent.a().dtype(), v1::FP64);
  EXPECT_EQ(result.bytes_sent_per_request, (6 * 4 + 4 * 5) * 8);
}

}  // namespace
}  // namespace matserve::client::bench
