// LaunchGate on the GPU: work behind the gate runs once the host opens it, directly and replayed
// from a captured graph, call after call; an unopened gate lets the work through after its
// timeout; an open without a wait lets only the next call through at once. Skips (visibly)
// without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <optional>

#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/resources.h"

namespace matserve::kernels {
namespace {

// The default bound, for the tests that leave the gate closed; the ones that open it use a long
// one, so a host descheduled between the enqueue and the open cannot pass for a timeout.
constexpr float kTimeoutMs = LaunchGate::kTimeoutNs * 1e-6f;
constexpr std::uint64_t kLongTimeoutNs = 1'000'000'000;  // 1 s
constexpr float kLongTimeoutMs = kLongTimeoutNs * 1e-6f;

class LaunchGateGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      cudaGetLastError();
      GTEST_SKIP() << "no CUDA device visible: GPU test not run";
    }
    stream_ = *create_stream();
    begin_ = *create_event();
    end_ = *create_event();
    word_ = *allocate_device(sizeof(int));
    use_gate(LaunchGate::kTimeoutNs);
  }

  void use_gate(std::uint64_t timeout_ns) {
    absl::StatusOr<LaunchGate> gate = LaunchGate::create(timeout_ns);
    ASSERT_TRUE(gate.ok()) << gate.status();
    gate_.emplace(*std::move(gate));
  }

  // The gate's wait, then a memset of `value` into word_.
  void enqueue_gated_work(int value) {
    ASSERT_TRUE(gate_->enqueue_wait(stream_.get()).ok());
    ASSERT_EQ(cudaMemsetAsync(word_.data(), value, sizeof(int), stream_.get()), cudaSuccess);
  }

  // Milliseconds from begin_ to end_ once the stream is done, and word_'s value.
  float finish(int* value) {
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    float ms = -1;
    EXPECT_EQ(cudaEventElapsedTime(&ms, begin_.get(), end_.get()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(value, word_.data(), sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    return ms;
  }

  Stream stream_;
  Event begin_, end_;
  DeviceBuffer word_;
  std::optional<LaunchGate> gate_;
};

TEST_F(LaunchGateGpu, WorkRunsOnceOpenedCallAfterCall) {
  use_gate(kLongTimeoutNs);
  for (int call = 1; call <= 3; ++call) {
    ASSERT_EQ(cudaEventRecord(begin_.get(), stream_.get()), cudaSuccess);
    enqueue_gated_work(call);
    ASSERT_EQ(cudaEventRecord(end_.get(), stream_.get()), cudaSuccess);
    gate_->open();
    int value = 0;
    EXPECT_LT(finish(&value), 0.5f * kLongTimeoutMs)
        << "call " << call << " waited for the timeout";
    EXPECT_EQ(value, call * 0x01010101) << "call " << call;
  }
}

TEST_F(LaunchGateGpu, ReplayedFromAGraphEachLaunchWaitsForItsOpen) {
  constexpr std::uint64_t kBoundNs = 100'000'000;  // 100 ms: opened well before, or timed out
  constexpr float kBoundMs = kBoundNs * 1e-6f;
  use_gate(kBoundNs);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  // External records: the captured events are the ones the host times.
  ASSERT_EQ(cudaEventRecordWithFlags(begin_.get(), stream_.get(), cudaEventRecordExternal),
            cudaSuccess);
  enqueue_gated_work(7);
  ASSERT_EQ(cudaEventRecordWithFlags(end_.get(), stream_.get(), cudaEventRecordExternal),
            cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(stream_.get(), &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int call = 0; call < 3; ++call) {
    ASSERT_EQ(cudaMemset(word_.data(), 0, sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_.get()), cudaSuccess);
    gate_->open();
    int value = 0;
    EXPECT_LT(finish(&value), 0.5f * kBoundMs) << "launch " << call;
    EXPECT_EQ(value, 7 * 0x01010101);
  }
  // Not opened: the replay still completes, after the timeout.
  ASSERT_EQ(cudaGraphLaunch(exec, stream_.get()), cudaSuccess);
  int value = 0;
  EXPECT_GE(finish(&value), 0.9f * kBoundMs);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_F(LaunchGateGpu, AnUnopenedGateTimesOutAndAnEarlyOpenPassesOneCall) {
  // Never opened: the work runs after the (default) timeout.
  ASSERT_EQ(cudaEventRecord(begin_.get(), stream_.get()), cudaSuccess);
  enqueue_gated_work(3);
  ASSERT_EQ(cudaEventRecord(end_.get(), stream_.get()), cudaSuccess);
  int value = 0;
  EXPECT_GE(finish(&value), 0.9f * kTimeoutMs);
  EXPECT_EQ(value, 3 * 0x01010101);
  // Opened before the wait was enqueued: that call passes at once, the next one waits again.
  constexpr std::uint64_t kBoundNs = 100'000'000;  // 100 ms
  constexpr float kBoundMs = kBoundNs * 1e-6f;
  use_gate(kBoundNs);
  gate_->open();
  for (const bool passes_at_once : {true, false}) {
    ASSERT_EQ(cudaEventRecord(begin_.get(), stream_.get()), cudaSuccess);
    enqueue_gated_work(5);
    ASSERT_EQ(cudaEventRecord(end_.get(), stream_.get()), cudaSuccess);
    const float ms = finish(&value);
    if (passes_at_once) {
      EXPECT_LT(ms, 0.5f * kBoundMs);
    } else {
      EXPECT_GE(ms, 0.9f * kBoundMs);
    }
  }
}

}  // namespace
}  // namespace matserve::kernels
