// The whole CLI run in-process (run_cli) against FakeMatrixService: output formats, exit codes,
// error lines, .npy in and out, client-side verification, messages above gRPC's 4 MiB default,
// and batched multiplies (multiply --batch, Client::MultiplyBatched).
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "client/cli/command_util.h"
#include "client/cli/commands.h"
#include "client/cpp/client.h"
#include "client/cpp/matrix.h"
#include "client/cpp/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/element.h"
#include "tests/client/fake_service.h"
#include "tests/support/test_temp_dir.h"

namespace matserve::client::cli {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Result {
  int code;
  std::string out;
  std::string err;
};

class CliRun : public ::testing::Test {
 protected:
  Result run(std::vector<std::string> args, bool with_target = true) {
    if (with_target) args.insert(args.begin(), {"--target", server_.target()});
    std::ostringstream out, err;
    const int code = run_cli(args, out, err);
    return {code, out.str(), err.str()};
  }
  std::string temp(const std::string& name) { return temp_.path(name); }

  testing::FakeServer server_;
  matserve::testing::TestTempDir temp_;
};

TEST_F(CliRun, InfoPrintsAnAlignedBlock) {
  const Result r = run({"info"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("version               0.0.0-fake\n"));
  EXPECT_THAT(r.out, HasSubstr("backend               cpu\n"));
  EXPECT_THAT(r.out,
              HasSubstr("device 0              Fake \"GPU\", cc 9.0, 132 SMs, 80.0 GiB total"));
  EXPECT_THAT(r.out, HasSubstr("max_message_bytes     1073741824 (1.00 GiB)\n"));
  EXPECT_TRUE(r.err.empty());
}

TEST_F(CliRun, InfoJsonIsOneObject) {
  const Result r = run({"info", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, StartsWith("{\"command\": \"info\", \"target\": \"127.0.0.1:"));
  EXPECT_THAT(r.out, HasSubstr("\"name\": \"Fake \\\"GPU\\\"\""));
  EXPECT_THAT(r.out, HasSubstr("\"limits\": {\"max_message_bytes\": 1073741824, "
                               "\"max_dimension\": 65536, \"max_matrix_bytes\": 1073741824, "
                               "\"memory_budget_bytes\": 0, \"resident_ttl_ms\": 60000}}\n"));
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
}

TEST_F(CliRun, KernelsTableAndFilter) {
  const Result r = run({"kernels"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, StartsWith("NAME            FAMILY  OP         PRECISIONS  BACKEND  "
                                "CONSTRAINTS   DESCRIPTION\n"));
  EXPECT_THAT(r.out, HasSubstr("fake_gemm       cpu     gemm       fp64,fp32   cpu      -"));
  const Result t = run({"kernels", "--op", "transpose", "--json"});
  ASSERT_EQ(t.code, kExitOk) << t.err;
  EXPECT_THAT(t.out, HasSubstr("\"name\": \"fake_transpose\""));
  EXPECT_THAT(t.out, HasSubstr("\"precisions\": [\"fp32\"]"));
  EXPECT_THAT(t.out, Not(HasSubstr("fake_gemm")));
}

TEST_F(CliRun, MultiplyRandomWithServerVerifyAndClientCheck) {
  const Result r =
      run({"multiply", "--random", "33x17x29", "--dtype", "fp64", "--verify", "--check", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"variant\": \"fake_gemm\", \"variant_requested\": \"auto\""));
  EXPECT_THAT(r.out, HasSubstr("\"m\": 33, \"n\": 17, \"k\": 29, \"dtype\": \"fp64\", "
                               "\"output_dtype\": \"fp64\", \"output_layout\": \"row\""));
  EXPECT_THAT(
      r.out,
      HasSubstr("\"timing_us\": {\"queue\": 1.5, \"h2d\": 20.25, \"launch\": 0, \"kernel\": 100, "
                "\"d2h\": 30, \"total\": 160, \"client_rpc\": "));
  EXPECT_THAT(r.out, HasSubstr("\"gflops\": 123.5"));
  // The fake says dynamic batching merged the request with another.
  EXPECT_THAT(r.out, HasSubstr("\"batch_wait\": 0.75}, \"merged_requests\": 2, \"gflops\": 123.5"));
  EXPECT_THAT(r.out, HasSubstr("\"compute\": \"default\", \"batch\": 1, \"timing_us\""));
  EXPECT_THAT(r.out, HasSubstr("\"server_verification\": {\"max_abs_error\": 0, "
                               "\"rel_l2_error\": 0}"));
  EXPECT_THAT(r.out, HasSubstr("\"client_check\": {\"max_abs_error\": 0, "
                               "\"rel_l2_error\": 0, \"nonfinite\": 0}"));
  EXPECT_TRUE(server_.service().last_multiply().verify());
  EXPECT_EQ(r.err, "");
  // alpha and beta stay unset (server defaults) unless given.
  EXPECT_FALSE(server_.service().last_multiply().has_alpha());
  EXPECT_EQ(server_.service().last_multiply().a().rows(), 33);
  EXPECT_EQ(server_.service().last_multiply().a().cols(), 29);
}

TEST_F(CliRun, Fp8ScalesAreReported) {
  const Result json = run({"multiply", "--random", "8x8x8", "--compute", "fp8", "--json"});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"gflops\": 123.5, \"fp8_scales\": {\"a_scale\": 0.25, "
                                  "\"b_scale\": 0.5}"));
  const Result human = run({"multiply", "--random", "8x8x8", "--compute", "fp8"});
  ASSERT_EQ(human.code, kExitOk) << human.err;
  EXPECT_THAT(human.out, HasSubstr("\nfp8_scales            A x 0.25, B x 0.5\n"));
  const Result fp32 = run({"multiply", "--random", "8x8x8", "--json"});
  EXPECT_THAT(fp32.out, Not(HasSubstr("fp8_scales")));
}

TEST_F(CliRun, MultiplyHumanOutput) {
  const Result r = run({"multiply", "--random", "8x8x8", "--check"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_FALSE(server_.service().last_multiply().verify());  // --check asks the server nothing
  EXPECT_THAT(r.out, HasSubstr("variant               fake_gemm (asked: auto)\n"));
  EXPECT_THAT(r.out, HasSubstr("shape                 m=8 n=8 k=8\n"));
  EXPECT_THAT(
      r.out, HasSubstr("data                  fp32 -> fp32 (row-major output, compute default)\n"));
  EXPECT_THAT(r.out, ContainsRegex("\nkernel_us +100\\.0\n"));  // right-aligned block
  EXPECT_THAT(r.out, ContainsRegex("\nqueue_us +1\\.5\nbatch_wait_us +0\\.8\nh2d_us "));
  EXPECT_THAT(r.out, HasSubstr("\nmerged_requests       2\ngflops                123.5\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("batch       ")));  // no batch line for one product
  EXPECT_THAT(r.out, HasSubstr("client_rel_l2_error   "));
}

TEST_F(CliRun, MultiplyFilesEveryLayoutTransposeAndBeta) {
  // op(A) 6 x 5 from a Fortran-order A^T, op(B) 5 x 4 from B^T, C column-major, fp64 so that the
  // fake's exact result matches the client's reference exactly.
  const NpyArray at = random_matrix(5, 6, DType::kF64, Layout::kColMajor, 1);
  const NpyArray bt = random_matrix(4, 5, DType::kF64, Layout::kRowMajor, 2);
  const NpyArray c = random_matrix(6, 4, DType::kF64, Layout::kColMajor, 3);
  ASSERT_TRUE(write_npy(temp("a.npy"), at).ok());
  ASSERT_TRUE(write_npy(temp("b.npy"), bt).ok());
  ASSERT_TRUE(write_npy(temp("c.npy"), c).ok());
  for (const char* layout : {"row", "col"}) {
    const Result r = run({"multiply",
                          "--a",
                          temp("a.npy"),
                          "--b",
                          temp("b.npy"),
                          "--c",
                          temp("c.npy"),
                          "--transpose-a",
                          "--transpose-b",
                          "--alpha",
                          "0.5",
                          "--beta",
                          "-2",
                          "--output-layout",
                          layout,
                          "--check",
                          "--tolerance",
                          "1e-12",
                          "--out",
                          temp("out.npy"),
                          "--json"});
    ASSERT_EQ(r.code, kExitOk) << layout << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("\"client_check\": {\"max_abs_error\": 0,")) << layout;
    absl::StatusOr<NpyArray> out = read_npy(temp("out.npy"));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->rows, 6);
    EXPECT_EQ(out->cols, 4);
    EXPECT_EQ(out->layout, std::string(layout) == "col" ? Layout::kColMajor : Layout::kRowMajor);
  }
}

TEST_F(CliRun, MultiplyConvertsFilesToDtype) {
  ASSERT_TRUE(
      write_npy(temp("a64.npy"), random_matrix(3, 4, DType::kF64, Layout::kRowMajor, 1)).ok());
  ASSERT_TRUE(
      write_npy(temp("b32.npy"), random_matrix(4, 2, DType::kF32, Layout::kRowMajor, 2)).ok());
  const Result mixed = run({"multiply", "--a", temp("a64.npy"), "--b", temp("b32.npy")});
  EXPECT_EQ(mixed.code, kExitUsage);
  EXPECT_THAT(mixed.err, HasSubstr("pass --dtype"));
  const Result r = run({"multiply", "--a", temp("a64.npy"), "--b", temp("b32.npy"), "--dtype",
                        "bf16", "--output-dtype", "fp32", "--check", "--out", temp("c.npy")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(server_.service().last_multiply().a().dtype(), v1::BF16);
  EXPECT_EQ(server_.service().last_multiply().output_dtype(), v1::FP32);
  absl::StatusOr<NpyArray> out = read_npy(temp("c.npy"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype, DType::kF32);
}

TEST_F(CliRun, RepeatReportsMediansAfterWarmup) {
  const Result r = run({"multiply", "--random", "16x16x16", "--warmup", "2", "--repeat", "5"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(server_.service().multiply_calls(), 7);
  EXPECT_THAT(r.out,
              HasSubstr("runs                  5 measured after 2 warm-up (medians below)\n"));
  EXPECT_THAT(r.out, ContainsRegex("\nkernel_us +100\\.0\n"));
  const Result j = run({"transpose", "--random", "4x4", "--repeat", "3", "--json"});
  ASSERT_EQ(j.code, kExitOk) << j.err;
  EXPECT_THAT(j.out, HasSubstr("\"gb_per_s\": 42, \"runs\": 3, \"warmup\": 0"));
}

TEST(CliUtil, MediansPerStage) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({3, 1, 2}), 2.0);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  std::vector<v1::Timing> t(3);
  for (int i = 0; i < 3; ++i) {
    t[i].set_kernel_us(10.0 * (3 - i));
    t[i].set_queue_us(i);
  }
  t[0].set_merged_requests(4);
  t[1].set_merged_requests(1);
  t[2].set_merged_requests(2);
  t[2].set_batch_wait_us(7);
  const v1::Timing m = median_timing(t);
  EXPECT_EQ(m.kernel_us(), 20.0);
  EXPECT_EQ(m.queue_us(), 1.0);
  EXPECT_EQ(m.merged_requests(), 2);
  EXPECT_EQ(m.batch_wait_us(), 0.0);
}

TEST_F(CliRun, MultiplyBatchedSendsStackedRandomOperands) {
  const Result r =
      run({"multiply", "--random", "6x5x4", "--batch", "3", "--dtype", "fp64", "--beta", "1",
           "--transpose-b", "--verify", "--tolerance", "1e-12", "--warmup", "1", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(server_.service().multiply_batched_calls(), 2);
  EXPECT_EQ(server_.service().multiply_calls(), 0);
  const v1::MultiplyBatchedRequest sent = server_.service().last_multiply_batched();
  EXPECT_EQ(sent.batch(), 3);
  EXPECT_TRUE(sent.transpose_b());
  EXPECT_TRUE(sent.verify());
  for (auto [m, rows, cols] :
       {std::tuple{&sent.a(), 6, 4}, std::tuple{&sent.b(), 5, 4}, std::tuple{&sent.c(), 6, 5}}) {
    EXPECT_EQ(m->batch(), 3);
    EXPECT_EQ(m->rows(), rows);
    EXPECT_EQ(m->cols(), cols);
    EXPECT_EQ(m->data().size(), 3u * rows * cols * sizeof(double));
  }
  // Product i's A, B and C from seeds 1 + 3i, 2 + 3i, 3 + 3i: product 0 is multiply --random's.
  const std::string a0 = random_matrix(6, 4, DType::kF64, Layout::kRowMajor, 1).bytes;
  const std::string a1 = random_matrix(6, 4, DType::kF64, Layout::kRowMajor, 4).bytes;
  const std::string b2 = random_matrix(5, 4, DType::kF64, Layout::kRowMajor, 8).bytes;
  EXPECT_EQ(sent.a().data().substr(0, a0.size()), a0);
  EXPECT_EQ(sent.a().data().substr(a0.size(), a1.size()), a1);
  EXPECT_EQ(sent.b().data().substr(2 * b2.size()), b2);
  EXPECT_THAT(r.out, HasSubstr("\"m\": 6, \"n\": 5, \"k\": 4, \"dtype\": \"fp64\""));
  EXPECT_THAT(r.out, HasSubstr("\"batch\": 3, \"timing_us\": {\"queue\": 1.5, "));
  EXPECT_THAT(r.out, HasSubstr("\"batch_wait\": 0}, \"merged_requests\": 1, \"gflops\": 123.5"));
  EXPECT_THAT(r.out, HasSubstr("\"runs\": 1, \"warmup\": 1, \"server_verification\": "
                               "{\"max_abs_error\": 0, \"rel_l2_error\": 0}"));

  const Result human = run({"multiply", "--random", "4x4x4", "--batch", "2", "--layout", "col"});
  ASSERT_EQ(human.code, kExitOk) << human.err;
  EXPECT_THAT(human.out, HasSubstr("shape                 m=4 n=4 k=4\n"
                                   "batch                 2 products in one MultiplyBatched call"));
  EXPECT_THAT(human.out, HasSubstr("\nmerged_requests       1\n"));
  EXPECT_EQ(server_.service().last_multiply_batched().a().layout(), v1::COL_MAJOR);
  // The server's check covers every product: one broken product fails the tolerance.
  const Result broken = run({"multiply", "--random", "4x4x4", "--batch", "2", "--variant", "broken",
                             "--verify", "--tolerance", "1e-3"});
  EXPECT_EQ(broken.code, kExitVerify);
  EXPECT_THAT(broken.err, HasSubstr("server rel_l2_error 1 exceeds tolerance 0.001"));
  const Result unknown = run({"multiply", "--random", "4x4x4", "--batch", "2", "--variant", "x"});
  EXPECT_EQ(unknown.code, kExitRpc);
  EXPECT_EQ(unknown.err, "error: INVALID_ARGUMENT: unknown variant 'x'\n");
}

TEST_F(CliRun, ClientMultiplyBatchedInlineAndResident) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::connect(server_.target());
  ASSERT_TRUE(client.ok()) << client.status();
  // Two products: A stacked two deep, B one matrix for both (broadcast).
  const NpyArray a0 = random_matrix(3, 4, DType::kF64, Layout::kRowMajor, 1);
  const NpyArray a1 = random_matrix(3, 4, DType::kF64, Layout::kRowMajor, 2);
  const NpyArray b = random_matrix(4, 2, DType::kF64, Layout::kRowMajor, 3);
  v1::MultiplyBatchedRequest request;
  request.set_batch(2);
  *request.mutable_a() = *matrix_from_npy(a0);
  request.mutable_a()->mutable_data()->append(a1.bytes);
  request.mutable_a()->set_batch(2);
  *request.mutable_b() = *matrix_from_npy(b);
  absl::StatusOr<v1::MultiplyBatchedReply> reply = (*client)->multiply_batched(request);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->c().batch(), 2);
  EXPECT_EQ(reply->c().rows(), 3);
  EXPECT_EQ(reply->c().cols(), 2);
  // Product i equals a Multiply of A_i and B.
  for (const auto& [i, ai] : {std::pair{0, &a0}, std::pair{1, &a1}}) {
    v1::MultiplyRequest one;
    *one.mutable_a() = *matrix_from_npy(*ai);
    *one.mutable_b() = *matrix_from_npy(b);
    absl::StatusOr<v1::MultiplyReply> single = (*client)->multiply(one);
    ASSERT_TRUE(single.ok()) << single.status();
    const std::size_t size = single->c().data().size();
    EXPECT_EQ(reply->c().data().substr(i * size, size), single->c().data()) << i;
  }
  // Resident: two A handles, one B handle, results kept (one resident matrix each).
  v1::MultiplyBatchedRequest resident;
  resident.set_batch(2);
  for (const NpyArray* m : {&a0, &a1, &b}) {
    absl::StatusOr<v1::ResidentInfo> up = (*client)->upload(*matrix_from_npy(*m));
    ASSERT_TRUE(up.ok()) << up.status();
    resident.add_a_handles(up->handle());
  }
  resident.add_b_handles(resident.a_handles(2));
  resident.mutable_a_handles()->RemoveLast();
  resident.set_keep_result(true);
  absl::StatusOr<v1::MultiplyBatchedReply> kept = (*client)->multiply_batched(resident);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->results_size(), 2);
  EXPECT_TRUE(kept->c().data().empty());
  absl::StatusOr<v1::Matrix> c1 = (*client)->download(kept->results(1).handle());
  ASSERT_TRUE(c1.ok()) << c1.status();
  EXPECT_EQ(c1->data(), reply->c().data().substr(c1->data().size()));
  resident.set_batch(3);  // 2 A handles for 3 products
  EXPECT_EQ((*client)->multiply_batched(resident).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CliRun, RpcErrorsPrintCodeAndMessage) {
  const Result r = run({"multiply", "--random", "2x2x2", "--variant", "nope"});
  EXPECT_EQ(r.code, kExitRpc);
  EXPECT_EQ(r.err, "error: INVALID_ARGUMENT: unknown variant 'nope'\n");
  EXPECT_TRUE(r.out.empty());
  ASSERT_TRUE(
      write_npy(temp("a23.npy"), random_matrix(2, 3, DType::kF32, Layout::kRowMajor, 1)).ok());
  const Result shapes = run({"multiply", "--a", temp("a23.npy"), "--b", temp("a23.npy")});
  EXPECT_EQ(shapes.code, kExitRpc);
  EXPECT_EQ(shapes.err, "error: INVALID_ARGUMENT: inner dimensions differ: 3 vs 2\n");
}

TEST_F(CliRun, UnreachableServerIsUnavailable) {
  const Result r = run({"--target", "127.0.0.1:1", "--deadline-ms", "5000", "info"}, false);
  EXPECT_EQ(r.code, kExitRpc);
  EXPECT_THAT(r.err, StartsWith("error: UNAVAILABLE: "));
}

TEST_F(CliRun, VerificationAboveToleranceExitsThree) {
  const Result r = run(
      {"multiply", "--random", "4x4x4", "--variant", "broken", "--check", "--tolerance", "1e-3"});
  EXPECT_EQ(r.code, kExitVerify);
  EXPECT_THAT(r.out, HasSubstr("client_max_abs_error  1.000e+00"));
  EXPECT_THAT(r.err, HasSubstr("error: verification failed: client rel_l2_error"));
  const Result s = run(
      {"multiply", "--random", "4x4x4", "--variant", "broken", "--verify", "--tolerance", "1e-3"});
  EXPECT_EQ(s.code, kExitVerify);
  EXPECT_THAT(s.out, HasSubstr("server_rel_l2_error   1.000e+00"));
  EXPECT_THAT(s.out, Not(HasSubstr("client_max_abs_error")));
  EXPECT_THAT(s.err, HasSubstr("server rel_l2_error 1 exceeds tolerance 0.001"));
  // --server-verify, the former name of --verify: the same request, and a warning on stderr.
  const Result old = run({"multiply", "--random", "4x4x4", "--variant", "broken", "--server-verify",
                          "--tolerance", "1e-3"});
  EXPECT_EQ(old.code, kExitVerify);
  EXPECT_TRUE(server_.service().last_multiply().verify());
  EXPECT_THAT(old.err, StartsWith("warning: --server-verify is deprecated: --verify asks the "
                                  "server's check"));
  EXPECT_THAT(old.err, HasSubstr("server rel_l2_error"));
}

TEST_F(CliRun, MessagesAboveFourMiBPass) {
  // C is 1100 x 1100 fp32 = 4.6 MiB, over gRPC's default receive limit.
  const Result r = run({"multiply", "--random", "1100x1100x1", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  // A client limited to 4 MiB refuses it.
  const Result small = run({"--max-message-mb", "4", "multiply", "--random", "1100x1100x1"});
  EXPECT_EQ(small.code, kExitRpc);
  EXPECT_THAT(small.err, StartsWith("error: RESOURCE_EXHAUSTED: "));
}

TEST_F(CliRun, TransposeColumnMajorWithScale) {
  const Result r = run({"transpose", "--random", "7x13", "--layout", "col", "--scale", "2",
                        "--check", "--tolerance", "0", "--out", temp("t.npy"), "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("\"rows\": 7, \"cols\": 13, \"dtype\": \"fp32\", \"layout\": \"col\""));
  EXPECT_THAT(r.out, HasSubstr("\"gb_per_s\": 42"));
  absl::StatusOr<NpyArray> out = read_npy(temp("t.npy"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->rows, 13);
  EXPECT_EQ(out->cols, 7);
  EXPECT_EQ(out->layout, Layout::kColMajor);
  // B(j, i) = 2 * A(i, j).
  const NpyArray a = random_matrix(7, 13, DType::kF32, Layout::kColMajor, 1);
  EXPECT_EQ(kernels::load_element(out->bytes.data(), DType::kF32, 2 * 13 + 5),
            2 * kernels::load_element(a.bytes.data(), DType::kF32, 5 * 7 + 2));
}

TEST_F(CliRun, BadInputFilesAreUsageErrors) {
  {
    std::FILE* f = std::fopen(temp("bad.npy").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("not numpy", f);
    std::fclose(f);
  }
  const Result r = run({"transpose", "--a", temp("bad.npy")});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("bad.npy: .npy: not a .npy file: bad magic"));
  const Result missing = run({"transpose", "--a", temp("missing.npy")});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_THAT(missing.err, HasSubstr("cannot open"));
}

TEST_F(CliRun, UsageErrorsExitOne) {
  const Result r = run({"multiply", "--random", "2x2"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err,
            "error: --random: '2x2' is not of the form MxNxK\n"
            "run 'matserve-cli multiply --help' for usage\n");
}

TEST_F(CliRun, HelpListsTheServersKernels) {
  const Result r = run({"multiply", "--help"});
  ASSERT_EQ(r.code, kExitOk);
  EXPECT_THAT(r.out, HasSubstr("kernels on the server (--variant NAME):\n"
                               "  fake_gemm  fp64,fp32  float64 reference, rounded once\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("fake_transpose")));
  const Result offline = run({"--target", "127.0.0.1:1", "help", "transpose"}, false);
  ASSERT_EQ(offline.code, kExitOk);
  EXPECT_THAT(offline.out, HasSubstr("see `matserve-cli kernels`"));
  const Result general = run({"--help"});
  EXPECT_THAT(general.out, HasSubstr("exit codes: 0 ok, 1 usage"));
}

TEST_F(CliRun, ResidentMatricesRoundTrip) {
  // Upload A (20 x 30) and B (30 x 10); multiply them on the server, keep C there.
  const Result a = run({"upload", "--random", "20x30", "--seed", "5", "--json"});
  ASSERT_EQ(a.code, kExitOk) << a.err;
  EXPECT_THAT(a.out, HasSubstr("{\"command\": \"upload\", \"resident\": {\"handle\": \"h1\", "
                               "\"rows\": 20, \"cols\": 30, \"dtype\": \"fp32\", "
                               "\"layout\": \"row\", \"bytes\": 2400, \"device\": \"cpu\""));
  ASSERT_TRUE(
      write_npy(temp("rb.npy"), random_matrix(30, 10, DType::kF32, Layout::kRowMajor, 6)).ok());
  const Result b = run({"upload", "--a", temp("rb.npy")});
  ASSERT_EQ(b.code, kExitOk) << b.err;
  EXPECT_THAT(b.out, HasSubstr("handle                h2\n"));
  const Result m = run(
      {"multiply", "--a-handle", "h1", "--b-handle", "h2", "--verify", "--keep-result", "--json"});
  ASSERT_EQ(m.code, kExitOk) << m.err;
  EXPECT_THAT(m.out, HasSubstr("\"m\": 20, \"n\": 10, \"k\": null, \"dtype\": \"resident\""));
  EXPECT_THAT(m.out, HasSubstr("\"result\": {\"handle\": \"h3\", \"rows\": 20, \"cols\": 10"));
  EXPECT_EQ(server_.service().last_multiply().a_handle(), "h1");
  EXPECT_FALSE(server_.service().last_multiply().has_a());
  // Mixed: A from a file, B resident; k comes from A.
  ASSERT_TRUE(
      write_npy(temp("ra.npy"), random_matrix(20, 30, DType::kF32, Layout::kRowMajor, 5)).ok());
  const Result mixed = run({"multiply", "--a", temp("ra.npy"), "--b-handle", "h2"});
  ASSERT_EQ(mixed.code, kExitOk) << mixed.err;
  EXPECT_THAT(mixed.out, HasSubstr("shape                 m=20 n=10 k=30\n"));

  // Download C in 512-byte chunks and compare with the product computed here.
  const Result d = run({"download", "--handle", "h3", "--out", temp("rc.npy"), "--chunk-mb", "1"});
  ASSERT_EQ(d.code, kExitOk) << d.err;
  EXPECT_THAT(d.out, HasSubstr("shape                 20 x 10 fp32 (row-major)\n"));
  absl::StatusOr<NpyArray> c = read_npy(temp("rc.npy"));
  ASSERT_TRUE(c.ok()) << c.status();
  const NpyArray ah = random_matrix(20, 30, DType::kF32, Layout::kRowMajor, 5);
  const NpyArray bh = random_matrix(30, 10, DType::kF32, Layout::kRowMajor, 6);
  double c00 = 0;
  for (int p = 0; p < 30; ++p) {
    c00 += kernels::load_element(ah.bytes.data(), DType::kF32, p) *
           kernels::load_element(bh.bytes.data(), DType::kF32, p * 10);
  }
  EXPECT_NEAR(kernels::load_element(c->bytes.data(), DType::kF32, 0), c00, 1e-5);
  EXPECT_EQ(server_.service().download_stream_chunks(), 2);  // header + 800 bytes

  // Transpose A in place: the handle now names a 30 x 20 matrix.
  const Result t = run({"transpose", "--a-handle", "h1", "--in-place"});
  ASSERT_EQ(t.code, kExitOk) << t.err;
  EXPECT_THAT(t.out, HasSubstr("result_handle         h1\n"));
  EXPECT_THAT(t.out, HasSubstr("result_shape          30 x 20 fp32 (row-major)\n"));

  const Result list = run({"resident"});
  ASSERT_EQ(list.code, kExitOk) << list.err;
  EXPECT_THAT(list.out, StartsWith("HANDLE  ROWS  COLS  DTYPE  LAYOUT  BYTES  DEVICE  EXPIRES_MS\n"
                                   "h1      30    20    fp32   row     2400   cpu     60000\n"));
  EXPECT_THAT(list.out, HasSubstr("total_bytes 4400\n"));
  const Result r = run({"release", "--handle", "h1", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "{\"command\": \"release\", \"handle\": \"h1\", \"bytes_freed\": 2400}\n");
  const Result again = run({"release", "--handle", "h1"});
  EXPECT_EQ(again.code, kExitRpc);
  EXPECT_EQ(again.err, "error: NOT_FOUND: no resident matrix 'h1'\n");
}

TEST_F(CliRun, UploadStreamsWhenAskedOrTooLargeForOneMessage) {
  // 600 x 600 fp32 = 1.37 MiB in 1 MiB chunks: two chunks.
  const Result asked = run({"upload", "--random", "600x600", "--chunk-mb", "1"});
  ASSERT_EQ(asked.code, kExitOk) << asked.err;
  EXPECT_EQ(server_.service().upload_stream_chunks(), 2);
  // 1200 x 1200 fp32 = 5.5 MiB with 4 MiB messages: streamed without being asked.
  const Result big = run({"--max-message-mb", "4", "upload", "--random", "1200x1200", "--json"});
  ASSERT_EQ(big.code, kExitOk) << big.err;
  EXPECT_THAT(big.out, HasSubstr("\"bytes\": 5760000"));
  EXPECT_EQ(server_.service().upload_stream_chunks(), 2);
  // Unary download of it fails at 4 MiB; streaming works.
  const Result unary = run({"--max-message-mb", "4", "download", "--handle", "h2"});
  EXPECT_EQ(unary.code, kExitRpc);
  EXPECT_THAT(unary.err, StartsWith("error: RESOURCE_EXHAUSTED: "));
  EXPECT_THAT(unary.err,
              HasSubstr("\nhint: a matrix larger than one message downloads with --chunk-mb N\n"));
  const Result streamed =
      run({"--max-message-mb", "4", "download", "--handle", "h2", "--chunk-mb", "2"});
  ASSERT_EQ(streamed.code, kExitOk) << streamed.err;
  EXPECT_THAT(streamed.out, HasSubstr("bytes                 5760000\n"));
}

TEST(ClientLibrary, MapsStatusCodesOneToOne) {
  for (int c = 0; c <= 16; ++c) {
    const grpc::Status g(static_cast<grpc::StatusCode>(c), c == 0 ? "" : "msg");
    const absl::Status a = from_grpc_status(g);
    EXPECT_EQ(static_cast<int>(a.code()), c);
    if (c != 0) {
      EXPECT_EQ(a.message(), "msg");
    }
  }
  EXPECT_EQ(status_code_name(absl::StatusCode::kResourceExhausted), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(status_code_name(absl::StatusCode::kUnauthenticated), "UNAUTHENTICATED");
  EXPECT_EQ(status_code_name(static_cast<absl::StatusCode>(99)), "CODE_99");
  EXPECT_FALSE(Client::connect("").ok());
  ClientOptions too_big;
  too_big.max_message_bytes = std::int64_t{4} << 30;
  EXPECT_FALSE(Client::connect("localhost:1", too_big).ok());
}

TEST(ClientLibrary, ConnectTimeoutReportsUnavailable) {
  ClientOptions options;
  options.connect_timeout = std::chrono::milliseconds(300);
  absl::StatusOr<std::unique_ptr<Client>> c = Client::connect("127.0.0.1:1", options);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace matserve::client::cli
