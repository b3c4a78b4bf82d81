// The filling state of a resident matrix created empty (CreateResident) and written range by range
// (WriteRange), possibly by many calls at once: which bytes are claimed by a write in progress or
// already written, how many are written, and whether the matrix is complete (usable). A range is
// claimed before its bytes are copied, so two writes can never overlap; a failed copy gives its
// claim back.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/runtime/byte_ranges.h"

namespace matserve::server {

class RangeFill {
 public:
  // Separate ranges one matrix may hold before it is complete (adjacent ranges count as one):
  // bounds the bookkeeping a client writing scattered tiny ranges can make the server keep.
  static constexpr std::size_t kMaxPieces = 65536;

  explicit RangeFill(std::uint64_t total) : total_(total) {}

  // Claims [offset, offset + length) for a write. OUT_OF_RANGE when it passes the end,
  // INVALID_ARGUMENT when empty, ALREADY_EXISTS when it overlaps bytes claimed or written before
  // (naming them), FAILED_PRECONDITION when the matrix is already complete, RESOURCE_EXHAUSTED over
  // kMaxPieces. Messages name the request's fields and quote `handle`.
  absl::Status claim(std::uint64_t offset, std::uint64_t length, const std::string& handle);
  // Ends a claimed write: on success its bytes count as written (true when that completed the
  // matrix: every byte written); on failure the claim is given back.
  bool finish(std::uint64_t offset, std::uint64_t length, bool ok);

  bool complete() const { return complete_.load(std::memory_order_acquire); }
  std::uint64_t total() const { return total_; }
  std::uint64_t written() const;

 private:
  const std::uint64_t total_;
  mutable absl::Mutex mu_;
  ByteRanges claimed_ ABSL_GUARDED_BY(mu_);
  std::uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> complete_{false};
};

}  // namespace matserve::server
