// Pinned staging ring: see cuda_staging.h.
#include "server/runtime/cuda_staging.h"

#include <algorithm>
#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace matserve::server {

using kernels::cuda_status;

absl::StatusOr<StagingRing> StagingRing::create(std::size_t chunk_bytes, int chunks) {
  StagingRing r;
  r.chunk_bytes_ = chunk_bytes;
  for (int i = 0; i < chunks; ++i) {
    absl::StatusOr<kernels::PinnedBuffer> b = kernels::allocate_pinned(chunk_bytes);
    if (!b.ok()) return b.status();
    r.chunks_.push_back(*std::move(b));
    cudaEvent_t e = nullptr;
    if (absl::Status s =
            cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
        !s.ok()) {
      return s;
    }
    r.ready_.emplace_back(e);
  }
  return r;
}

absl::Status StagingRing::to_device(void* dst, const void* src, std::size_t n, cudaStream_t stream,
                                    ParallelCopier& copier) {
  const std::size_t k = chunks_.size();
  for (std::size_t off = 0, i = 0; off < n; off += chunk_bytes_, ++i) {
    const std::size_t len = std::min(chunk_bytes_, n - off);
    const std::size_t slot = i % k;
    // The chunk is free once the DMA that last read it has finished.
    if (absl::Status s = cuda_status(cudaEventSynchronize(ready_[slot].get()), "staging wait");
        !s.ok()) {
      return s;
    }
    copier.copy(chunks_[slot].data(), static_cast<const char*>(src) + off, len);
    if (absl::Status s =
            cuda_status(cudaMemcpyAsync(static_cast<char*>(dst) + off, chunks_[slot].data(), len,
                                        cudaMemcpyHostToDevice, stream),
                        "cudaMemcpyAsync H2D");
        !s.ok()) {
      return s;
    }
    cudaEventRecord(ready_[slot].get(), stream);
  }
  return absl::OkStatus();
}

absl::Status StagingRing::to_host(void* dst, const void* src, std::size_t n, cudaStream_t stream,
                                  ParallelCopier& copier) {
  const std::size_t k = chunks_.size();
  const std::size_t count = (n + chunk_bytes_ - 1) / chunk_bytes_;
  const auto issue = [&](std::size_t i) -> absl::Status {
    const std::size_t off = i * chunk_bytes_;
    const std::size_t len = std::min(chunk_bytes_, n - off);
    absl::Status s =
        cuda_status(cudaMemcpyAsync(chunks_[i % k].data(), static_cast<const char*>(src) + off, len,
                                    cudaMemcpyDeviceToHost, stream),
                    "cudaMemcpyAsync D2H");
    cudaEventRecord(ready_[i % k].get(), stream);
    return s;
  };
  for (std::size_t i = 0; i < std::min(k, count); ++i) {
    if (absl::Status s = issue(i); !s.ok()) return s;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t off = i * chunk_bytes_;
    const std::size_t len = std::min(chunk_bytes_, n - off);
    if (absl::Status s = cuda_status(cudaEventSynchronize(ready_[i % k].get()), "staging wait");
        !s.ok()) {
      return s;
    }
    copier.copy(static_cast<char*>(dst) + off, chunks_[i % k].data(), len);
    if (i + k < count) {
      if (absl::Status s = issue(i + k); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace matserve::server
