// Pinned staging ring: see cuda_staging.h.
#include "server/runtime/cuda_staging.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/cuda_status.h"
#include "server/runtime/message_memory.h"

namespace matserve::server {
namespace {

using kernels::cuda_status;

// Below this a transfer stays on the caller; above it, one helper per this many bytes.
constexpr std::size_t kBytesPerHelper = std::size_t{1} << 20;

// Waits until `slot` last carried chunk `previous` (stored as previous + 1). Chunks are claimed in
// increasing order, so the one being waited for is already being worked on: a short wait.
void await_issued(const std::atomic<std::size_t>& slot, std::size_t want) {
  for (int spins = 0; slot.load(std::memory_order_acquire) != want; ++spins) {
    if (spins > 64) std::this_thread::yield();
  }
}

// The first error of a transfer whose chunks run on several threads.
class FirstError {
 public:
  void set(absl::Status s) {
    if (s.ok()) return;
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = std::move(s);
  }
  absl::Status get() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<StagingRing> StagingRing::create(std::size_t chunk_bytes, int chunks,
                                                const PinnedRanges* pinned) {
  StagingRing r;
  r.pinned_ = pinned;
  r.chunk_bytes_ = chunk_bytes;
  r.issued_ = std::make_unique<std::atomic<std::size_t>[]>(static_cast<std::size_t>(chunks));
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

bool StagingRing::dma_ready(const void* p, std::size_t n) const {
  return message_memory::is_pinned(p, n) || (pinned_ != nullptr && pinned_->contains(p, n));
}

std::vector<StagingRing::Chunk> StagingRing::split(std::span<const StagedCopy> copies) const {
  std::vector<Chunk> out;
  for (std::size_t c = 0; c < copies.size(); ++c) {
    for (std::size_t off = 0; off < copies[c].bytes; off += chunk_bytes_) {
      out.push_back({c, off, std::min(chunk_bytes_, copies[c].bytes - off)});
    }
  }
  return out;
}

std::size_t StagingRing::helpers_for(std::size_t bytes, const ParallelCopier& copier) const {
  if (bytes < 2 * kBytesPerHelper) return 0;
  // Each thread needs a slot in use and one filling, so the ring bounds the useful threads.
  const std::size_t by_ring = std::max<std::size_t>(1, chunks_.size() / 2) - 1;
  return std::min({copier.helpers(), bytes / kBytesPerHelper - 1, by_ring});
}

absl::Status StagingRing::to_device(std::span<const StagedCopy> all, cudaStream_t stream,
                                    ParallelCopier& copier) {
  // Sources in pinned memory (message_memory) go by DMA as they are; the rest through the ring.
  absl::InlinedVector<StagedCopy, 4> staged;
  for (const StagedCopy& c : all) {
    if (!dma_ready(c.src, c.bytes)) {
      staged.push_back(c);
    } else if (absl::Status s = cuda_status(
                   cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyHostToDevice, stream), "H2D");
               !s.ok()) {
      return s;
    }
  }
  return staged.empty() ? absl::OkStatus() : to_device_staged(staged, stream, copier);
}

absl::Status StagingRing::to_device_staged(std::span<const StagedCopy> copies, cudaStream_t stream,
                                           ParallelCopier& copier) {
  const std::vector<Chunk> plan = split(copies);
  const std::size_t k = chunks_.size();
  for (std::size_t i = 0; i < k; ++i) issued_[i].store(0, std::memory_order_relaxed);
  std::size_t total = 0;
  for (const StagedCopy& c : copies) total += c.bytes;
  FirstError error;
  copier.for_each(plan.size(), helpers_for(total, copier), [&](std::size_t j) {
    const Chunk& ch = plan[j];
    const std::size_t slot = j % k;
    if (j >= k) await_issued(issued_[slot], j - k + 1);
    // The slot is free once the DMA that last read it (this transfer's or an earlier one's) ends.
    absl::Status s = cuda_status(cudaEventSynchronize(ready_[slot].get()), "staging wait");
    if (s.ok()) {
      const StagedCopy& c = copies[ch.copy];
      std::memcpy(chunks_[slot].data(), static_cast<const char*>(c.src) + ch.offset, ch.bytes);
      s = cuda_status(cudaMemcpyAsync(static_cast<char*>(c.dst) + ch.offset, chunks_[slot].data(),
                                      ch.bytes, cudaMemcpyHostToDevice, stream),
                      "cudaMemcpyAsync H2D");
      if (s.ok()) s = cuda_status(cudaEventRecord(ready_[slot].get(), stream), "staging event");
    }
    error.set(std::move(s));
    issued_[slot].store(j + 1, std::memory_order_release);  // also after an error: no waiter hangs
  });
  return error.get();
}

absl::Status StagingRing::to_host(void* dst, const void* src, std::size_t n, cudaStream_t stream,
                                  ParallelCopier& copier) {
  if (dma_ready(dst, n)) {
    return cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream), "D2H");
  }
  const StagedCopy whole{dst, src, n};
  const std::vector<Chunk> plan = split({&whole, 1});
  const std::size_t k = chunks_.size();
  const auto issue = [&](std::size_t j) -> absl::Status {
    const Chunk& ch = plan[j];
    const std::size_t slot = j % k;
    absl::Status s =
        cuda_status(cudaMemcpyAsync(chunks_[slot].data(), static_cast<const char*>(src) + ch.offset,
                                    ch.bytes, cudaMemcpyDeviceToHost, stream),
                    "cudaMemcpyAsync D2H");
    if (s.ok()) s = cuda_status(cudaEventRecord(ready_[slot].get(), stream), "staging event");
    issued_[slot].store(j + 1, std::memory_order_release);
    return s;
  };
  for (std::size_t i = 0; i < k; ++i) issued_[i].store(0, std::memory_order_relaxed);
  for (std::size_t j = 0; j < std::min(k, plan.size()); ++j) {
    if (absl::Status s = issue(j); !s.ok()) return s;
  }
  FirstError error;
  copier.for_each(plan.size(), helpers_for(n, copier), [&](std::size_t j) {
    const Chunk& ch = plan[j];
    const std::size_t slot = j % k;
    await_issued(issued_[slot], j + 1);
    absl::Status s = cuda_status(cudaEventSynchronize(ready_[slot].get()), "staging wait");
    if (s.ok()) {
      std::memcpy(static_cast<char*>(dst) + ch.offset, chunks_[slot].data(), ch.bytes);
    }
    error.set(std::move(s));
    // The slot carries chunk j + k next (issued even after an error, so no waiter hangs).
    if (j + k < plan.size()) error.set(issue(j + k));
  });
  return error.get();
}

}  // namespace matserve::server
