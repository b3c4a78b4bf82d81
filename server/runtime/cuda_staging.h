// Pinned staging for one CUDA stream: a ring of pinned host chunks through which pageable bytes
// (a gRPC message, a reply) reach the device and come back. Host copies into chunk i overlap with
// the DMA of chunk i-1, and each host copy is split across threads, so a transfer runs near the
// pinned PCIe rate with one host copy per byte (instead of the pageable rate, 7.5 times slower).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"
#include "server/runtime/parallel_copy.h"

namespace matserve::server {

class StagingRing {
 public:
  static absl::StatusOr<StagingRing> create(std::size_t chunk_bytes, int chunks);

  // Queues host -> device copies of n bytes on `stream`; returns once `src` may be reused (the
  // device side completes in stream order).
  absl::Status to_device(void* dst, const void* src, std::size_t n, cudaStream_t stream,
                         ParallelCopier& copier);
  // Copies n device bytes into `dst`; returns when `dst` holds them.
  absl::Status to_host(void* dst, const void* src, std::size_t n, cudaStream_t stream,
                       ParallelCopier& copier);

  std::size_t pinned_bytes() const { return chunk_bytes_ * chunks_.size(); }

 private:
  std::size_t chunk_bytes_ = 0;
  std::vector<kernels::PinnedBuffer> chunks_;
  std::vector<kernels::Event> ready_;  // recorded after the DMA that last used each chunk
};

}  // namespace matserve::server
