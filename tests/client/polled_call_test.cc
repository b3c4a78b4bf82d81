// The C++ client with ClientOptions::poll_replies against the fake service: replies, errors and
// unreachable servers come back exactly as with the blocking wait, for the calls matserve-bench
// times (multiply, list_resident, health) and a resident round trip.
#include <memory>
#include <string>

#include "client/cpp/client.h"
#include "client/cpp/matrix.h"
#include "gtest/gtest.h"
#include "tests/client/fake_service.h"

namespace matserve::client {
namespace {

using kernels::DType;
using kernels::Layout;

std::unique_ptr<Client> connect(const std::string& target, bool poll) {
  ClientOptions options;
  options.poll_replies = poll;
  options.stripes = 0;
  options.deadline = std::chrono::seconds(10);
  absl::StatusOr<std::unique_ptr<Client>> c = Client::connect(target, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

TEST(PolledCall, RepliesEqualTheBlockingOnes) {
  testing::FakeServer server;
  const std::unique_ptr<Client> polled = connect(server.target(), true);
  const std::unique_ptr<Client> blocking = connect(server.target(), false);
  v1::MultiplyRequest request;
  *request.mutable_a() = *matrix_from_npy(random_matrix(7, 5, DType::kF32, Layout::kRowMajor, 1));
  *request.mutable_b() = *matrix_from_npy(random_matrix(5, 3, DType::kF32, Layout::kRowMajor, 2));
  absl::StatusOr<v1::MultiplyReply> got = polled->multiply(request);
  absl::StatusOr<v1::MultiplyReply> want = blocking->multiply(request);
  ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
  EXPECT_EQ(got->c().data(), want->c().data());
  EXPECT_EQ(got->c().rows(), 7);
  EXPECT_EQ(got->c().cols(), 3);

  absl::StatusOr<v1::ResidentInfo> kept = polled->upload(request.a(), 0, "");
  ASSERT_TRUE(kept.ok()) << kept.status();
  absl::StatusOr<v1::ListResidentReply> listed = polled->list_resident();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->matrices_size(), 1);
  absl::StatusOr<v1::Matrix> back = polled->download(kept->handle());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data(), request.a().data());
  ASSERT_TRUE(polled->release(kept->handle()).ok());

  absl::StatusOr<std::string> polled_health = polled->health();
  absl::StatusOr<std::string> blocking_health = blocking->health();
  EXPECT_EQ(polled_health.status().code(), blocking_health.status().code());
  if (polled_health.ok()) EXPECT_EQ(*polled_health, *blocking_health);
}

TEST(PolledCall, ErrorsComeBackWithTheirCode) {
  testing::FakeServer server;
  const std::unique_ptr<Client> polled = connect(server.target(), true);
  v1::MultiplyRequest request;
  request.set_a_handle("no-such-handle");
  *request.mutable_b() = *matrix_from_npy(random_matrix(5, 3, DType::kF32, Layout::kRowMajor, 2));
  absl::StatusOr<v1::MultiplyReply> got = polled->multiply(request);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_EQ(polled->download("no-such-handle").status().code(), absl::StatusCode::kNotFound);
}

TEST(PolledCall, AnUnreachableServerFailsInsteadOfSpinningForever) {
  int port = 0;
  {
    testing::FakeServer gone;  // a port that was just free and is closed again
    port = std::stoi(gone.target().substr(gone.target().rfind(':') + 1));
  }
  const std::unique_ptr<Client> polled = connect("127.0.0.1:" + std::to_string(port), true);
  absl::StatusOr<v1::ListResidentReply> listed = polled->list_resident();
  EXPECT_EQ(listed.status().code(), absl::StatusCode::kUnavailable) << listed.status();
}

}  // namespace
}  // namespace matserve::client
