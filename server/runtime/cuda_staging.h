// Pinned staging for one CUDA stream: a ring of pinned host chunks through which pageable bytes
// (a gRPC message, a reply) reach the device and come back, with one host copy per byte instead
// of the pageable rate (7.5 times slower). A transfer (all of a request's operands together) is
// cut into chunks; the caller and the copier's helpers each take whole chunks in order, copy one
// into its ring slot and issue its DMA at once, so the DMA of chunk i overlaps the host copies of
// the chunks after it and several host copies run side by side. Small transfers stay on the
// caller (a helper's wake-up costs more than copying them).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"
#include "server/runtime/parallel_copy.h"
#include "server/runtime/pinned_ranges.h"

namespace matserve::server {

// One contiguous host <-> device copy of a transfer.
struct StagedCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
};

class StagingRing {
 public:
  // `pinned` (may be null; must outlive the ring): more host ranges that go by DMA where they are,
  // like the pinned message heap.
  static absl::StatusOr<StagingRing> create(std::size_t chunk_bytes, int chunks,
                                            const PinnedRanges* pinned = nullptr);

  // Queues the host -> device copies on `stream`. A source in the pinned message heap
  // (message_memory) is read by DMA where it is: it must stay unchanged until `stream` reaches
  // this point. Every other source is copied through the ring and may be reused on return.
  absl::Status to_device(std::span<const StagedCopy> copies, cudaStream_t stream,
                         ParallelCopier& copier);
  absl::Status to_device(void* dst, const void* src, std::size_t n, cudaStream_t stream,
                         ParallelCopier& copier) {
    const StagedCopy c{dst, src, n};
    return to_device({&c, 1}, stream, copier);
  }
  // Copies n device bytes into `dst`. Into a `dst` in the pinned message heap it is one DMA,
  // queued on `stream`: `dst` holds the bytes once the caller has synchronized `stream` (every
  // caller does, to finish the request). Any other `dst` holds them on return.
  absl::Status to_host(void* dst, const void* src, std::size_t n, cudaStream_t stream,
                       ParallelCopier& copier);

  std::size_t pinned_bytes() const { return chunk_bytes_ * chunks_.size(); }

 private:
  struct Chunk {
    std::size_t copy = 0;    // index into the transfer's copies
    std::size_t offset = 0;  // within that copy
    std::size_t bytes = 0;
  };
  std::vector<Chunk> split(std::span<const StagedCopy> copies) const;
  // True when DMA can read or write [p, p + n) where it is (pinned message heap or `pinned_`).
  bool dma_ready(const void* p, std::size_t n) const;
  absl::Status to_device_staged(std::span<const StagedCopy> copies, cudaStream_t stream,
                                ParallelCopier& copier);
  // Helpers worth waking for `bytes` (0 below the size where a wake-up costs more than it saves).
  std::size_t helpers_for(std::size_t bytes, const ParallelCopier& copier) const;

  const PinnedRanges* pinned_ = nullptr;
  std::size_t chunk_bytes_ = 0;
  std::vector<kernels::PinnedBuffer> chunks_;
  std::vector<kernels::Event> ready_;  // recorded after the DMA that last used each slot
  // Per slot: the chunk (of the transfer in progress) whose DMA was issued last, + 1; 0 = none.
  // A chunk waits for its slot's previous chunk before it reuses the slot.
  std::unique_ptr<std::atomic<std::size_t>[]> issued_;
};

}  // namespace matserve::server
