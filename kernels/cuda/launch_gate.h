// LaunchGate: holds a stream until the host has finished enqueueing a call's device work.
//
// On an idle GPU the device starts a call's first commands while the host is still writing the
// rest of the launch, so an interval timed by events inside the call's work also holds part of
// the host's launch. A server's request thread launches with the CUDA driver's state cold in its
// core's caches (its request was parsed there, another thread ran the previous call), and its
// launch takes three to five times as long as in a tight loop: the device then waits within the
// timed interval. A gate is a one-thread kernel enqueued first (and captured into the call's
// graph with the rest) that polls a word of mapped, pinned host memory; the host sets the word
// once every command of the call is enqueued, and the kernel clears it and returns, so the device
// runs the timed work start to finish, as it does behind a busy stream.
//
// The wait is bounded (kTimeoutNs unless created with another bound): a host that never opens the
// gate, or a driver that must drain the device before it can finish the launch (lazy module
// loading, a synchronizing free on another thread), delays the call by at most that, never
// deadlocks. The word is a flag, not a count: an open without a wait lets the next call through
// ungated, a wait without an open times out; both heal by themselves. One gate per stream, one call
// on it at a time. (A stream wait on the word, cuStreamWaitValue32, holds the launch itself and
// measured a little tighter, but it cannot time out: the first call of a launch deadlocked behind
// it.)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"

namespace matserve::kernels {

class LaunchGate {
 public:
  static constexpr std::uint64_t kTimeoutNs = 1'000'000;  // 1 ms

  static absl::StatusOr<LaunchGate> create(std::uint64_t timeout_ns = kTimeoutNs);

  // Enqueues the waiting kernel on `stream` (legal under capture): work enqueued after it runs
  // once open() has run, or the timeout has passed.
  absl::Status enqueue_wait(cudaStream_t stream) const;
  // Lets the (next) waiting kernel through.
  void open();

 private:
  LaunchGate() = default;
  PinnedBuffer word_;                     // 1: open; the kernel sets it back to 0
  std::uint32_t* device_word_ = nullptr;  // the same word as the device addresses it
  std::uint64_t timeout_ns_ = kTimeoutNs;
};

}  // namespace matserve::kernels
