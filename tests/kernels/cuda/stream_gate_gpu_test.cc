// StreamGate on a real GPU: work behind a closed gate does not start until the host opens it;
// events around gated work time the device alone, not the host's delay in enqueuing it; a hold
// that goes out of scope opens the gate (no stream is left waiting on an error path).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_gate.h"
#include "kernels/cuda/stream_resources.h"

namespace matserve::kernels {
namespace {

class StreamGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
    absl::StatusOr<Stream> s = create_stream();
    ASSERT_TRUE(s.ok()) << s.status();
    stream_ = *std::move(s);
    absl::StatusOr<StreamGate> g = StreamGate::create();
    ASSERT_TRUE(g.ok()) << g.status();
    gate_.emplace(*std::move(g));
    absl::StatusOr<DeviceBuffer> b = allocate_device(1 << 20);
    ASSERT_TRUE(b.ok()) << b.status();
    buffer_ = *std::move(b);
  }

  unsigned char first_byte() {
    unsigned char v = 0;
    EXPECT_EQ(cudaMemcpy(&v, buffer_.data(), 1, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

  Stream stream_;
  std::optional<StreamGate> gate_;
  DeviceBuffer buffer_;
};

TEST_F(StreamGateTest, WorkBehindAClosedGateWaitsForTheHost) {
  ASSERT_EQ(cudaMemset(buffer_.data(), 0, buffer_.size()), cudaSuccess);
  absl::StatusOr<StreamGate::Hold> hold = gate_->close(stream_.get());
  ASSERT_TRUE(hold.ok()) << hold.status();
  ASSERT_EQ(cudaMemsetAsync(buffer_.data(), 7, buffer_.size(), stream_.get()), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(cudaStreamQuery(stream_.get()), cudaErrorNotReady);
  EXPECT_EQ(first_byte(), 0) << "the memset ran before the gate opened";
  hold->open();
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  EXPECT_EQ(first_byte(), 7);
}

TEST_F(StreamGateTest, EventsAroundGatedWorkTimeTheDeviceNotTheHostsDelay) {
  absl::StatusOr<Event> start = create_event();
  absl::StatusOr<Event> end = create_event();
  ASSERT_TRUE(start.ok() && end.ok());
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<StreamGate::Hold> hold = gate_->close(stream_.get());
    ASSERT_TRUE(hold.ok()) << hold.status();
    ASSERT_EQ(cudaEventRecord(start->get(), stream_.get()), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(buffer_.data(), round, buffer_.size(), stream_.get()), cudaSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a slow host launch
    ASSERT_EQ(cudaEventRecord(end->get(), stream_.get()), cudaSuccess);
    hold->open();
    ASSERT_EQ(cudaEventSynchronize(end->get()), cudaSuccess);
    float ms = 0;
    ASSERT_EQ(cudaEventElapsedTime(&ms, start->get(), end->get()), cudaSuccess);
    EXPECT_LT(ms, 10.0f) << "round " << round << ": the interval counted the host's 30 ms";
  }
}

TEST_F(StreamGateTest, AHoldThatGoesOutOfScopeOpensTheGate) {
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<StreamGate::Hold> hold = gate_->close(stream_.get());
    ASSERT_TRUE(hold.ok()) << hold.status();
  }
  ASSERT_EQ(cudaMemsetAsync(buffer_.data(), 9, buffer_.size(), stream_.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  EXPECT_EQ(first_byte(), 9);
}

}  // namespace
}  // namespace matserve::kernels
