// Keeps a shrinking shared-memory object from crashing the server. A client owns the objects the
// server maps for it (RegisterSharedMemory); if it truncates one while registered, the next access
// to a page past the new end raises SIGBUS in whichever thread touches it (a copy thread, OpenBLAS,
// the CUDA driver). This guard's SIGBUS handler looks the address up among the guarded ranges: on
// a hit it maps private zero pages over the rest of the range, from the faulting page to the
// range's end, in one mmap (the access goes on, reading zeros) and marks the range faulted, so that
// the request fails with an error instead of the process dying. A later fault below the replaced
// part replaces from its own page on, so a range is never split into more than two mappings,
// however many pages a call touches. A faulted range stays faulted for its lifetime: its bytes are
// no longer the object's, so its region fails every call until it is unregistered and registered
// again. A guarded address never takes the default action (should the mmap fail, the handler
// retries it on the next fault). A fault outside every guarded range keeps the default action. This
// file owns the one process-wide table the handler reads (a signal handler can reach no other
// state).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace matserve::server::shm_fault_guard {

// Installs the handler (idempotent). Fails only when sigaction does.
absl::Status install();

// One guarded range [begin, begin + bytes) for its lifetime. Movable, not copyable.
class Range {
 public:
  Range() = default;
  // RESOURCE_EXHAUSTED when the table (kSlots ranges) is full.
  static absl::StatusOr<Range> guard(const void* begin, std::size_t bytes);
  Range(Range&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  Range& operator=(Range&& o) noexcept;
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;
  ~Range();

  // True once an access inside the range hit a page the object no longer has; stays true.
  bool faulted() const;

 private:
  explicit Range(int slot) : slot_(slot) {}
  int slot_ = -1;
};

// Ranges guarded at once, at most (one per registered region).
inline constexpr int kSlots = 4096;

}  // namespace matserve::server::shm_fault_guard
