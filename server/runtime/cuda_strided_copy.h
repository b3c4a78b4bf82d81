// Strided blocks (split_plan.h's StridedBytes) copied by cudaMemcpy2DAsync between any two of
// host and device memory, and the event hand-over between two streams: what the GEMMs that move
// operand pieces themselves (spread over devices, out of core) share.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/cuda/cuda_status.h"
#include "server/runtime/split_plan.h"

namespace matserve::server {

// One strided block; nothing to do for an empty one.
inline absl::Status copy_2d(void* to, std::size_t to_pitch, const void* from,
                            std::size_t from_pitch, std::size_t width, std::size_t height,
                            cudaStream_t stream, const char* what) {
  if (width == 0 || height == 0) return absl::OkStatus();
  return kernels::cuda_status(
      cudaMemcpy2DAsync(to, to_pitch, from, from_pitch, width, height, cudaMemcpyDefault, stream),
      what);
}

// The strided block `s` of the matrix at `from`, packed at `to` (rows of s.width_bytes).
inline absl::Status copy_packed(std::byte* to, const std::byte* from, const StridedBytes& s,
                                cudaStream_t stream, const char* what) {
  return copy_2d(to, s.width_bytes, from + s.offset_bytes, s.pitch_bytes, s.width_bytes, s.height,
                 stream, what);
}

// The packed block at `from` back into its place `s` of the matrix at `to`.
inline absl::Status copy_unpacked(std::byte* to, const std::byte* from, const StridedBytes& s,
                                  cudaStream_t stream, const char* what) {
  return copy_2d(to + s.offset_bytes, s.pitch_bytes, from, s.width_bytes, s.width_bytes, s.height,
                 stream, what);
}

// `event` recorded on `stream`.
inline absl::Status record_on(cudaEvent_t event, cudaStream_t stream) {
  return kernels::cuda_status(cudaEventRecord(event, stream), "record event");
}

// `stream` made to wait for `event`.
inline absl::Status wait_on(cudaStream_t stream, cudaEvent_t event) {
  return kernels::cuda_status(cudaStreamWaitEvent(stream, event, 0), "wait for event");
}

// `event` recorded on `on`, and `waiter` made to wait for it.
inline absl::Status record_then_wait(cudaEvent_t event, cudaStream_t on, cudaStream_t waiter) {
  if (absl::Status s = record_on(event, on); !s.ok()) return s;
  return wait_on(waiter, event);
}

}  // namespace matserve::server
