// Filling state of a resident matrix written range by range: see range_fill.h.
#include "server/runtime/range_fill.h"

#include "absl/strings/str_cat.h"
#include "server/runtime/quote.h"

namespace matserve::server {

absl::Status RangeFill::claim(std::uint64_t offset, std::uint64_t length,
                              const std::string& handle) {
  if (length == 0)
    return absl::InvalidArgumentError("data: empty; a range carries 1 or more bytes");
  if (offset > total_ || length > total_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("offset: the range [", offset, ", ", offset + length,
                                              ") passes the end of resident matrix ", quote(handle),
                                              " (", total_, " bytes)"));
  }
  absl::MutexLock lock(&mu_);
  if (complete()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "handle: resident matrix ", quote(handle), " is complete; its bytes can no longer change"));
  }
  const auto [begin, end] = claimed_.overlap(offset, length);
  if (end != 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "offset: the range [", offset, ", ", offset + length, ") overlaps bytes [", begin, ", ",
        end, ") of resident matrix ", quote(handle), " already written or being written"));
  }
  // A range adjacent to one held merges with it; only a separate one adds a piece.
  if (claimed_.pieces() >= kMaxPieces && !claimed_.adjacent(offset, length)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("offset: resident matrix ", quote(handle), " already holds ", kMaxPieces,
                     " separate ranges; write ranges adjacent to those received, or larger ones"));
  }
  claimed_.insert(offset, length);
  return absl::OkStatus();
}

bool RangeFill::finish(std::uint64_t offset, std::uint64_t length, bool ok) {
  absl::MutexLock lock(&mu_);
  if (!ok) {
    claimed_.erase(offset, length);
    return false;
  }
  written_ += length;
  if (written_ == total_ && !complete()) {
    complete_.store(true, std::memory_order_release);
    return true;
  }
  return false;
}

std::uint64_t RangeFill::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

}  // namespace matserve::server
