// Resident matrices: device memory that outlives a request, named by an unguessable handle
// (128 random bits after this replica's id: replica_handle.h), visible only to the owner that
// created it, released on request or after an idle TTL. Operations hold a shared lock on a matrix
// while they read it; in-place transposes hold it exclusively. The memory is a long-lived pool
// block, so it counts against the device budget.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/types.h"
#include "server/runtime/jobs.h"
#include "server/runtime/memory_pool.h"
#include "server/runtime/range_fill.h"

namespace matserve::server {

struct ResidentMatrix {
  std::string handle;
  std::string owner;  // who may see it ("" = anonymous clients)
  int device = 0;     // the backend's device index; -1 for a matrix in host memory
  std::string device_label;
  MemoryPool::Block block;
  // A matrix too large for a device's budget, kept in the CUDA backend's pinned host memory
  // (cuda_host_matrices.h; `block` is from its pool). Only products (out of core), uploads,
  // downloads and ranges use such a matrix.
  bool in_host_memory = false;
  absl::Mutex mu;  // shared: operations reading it; exclusive: in-place transpose
  // Shape, guarded by mu (an in-place transpose swaps rows and cols).
  std::int64_t rows ABSL_GUARDED_BY(mu) = 0;
  std::int64_t cols ABSL_GUARDED_BY(mu) = 0;
  kernels::DType dtype = kernels::DType::kF32;
  kernels::Layout layout = kernels::Layout::kRowMajor;
  std::atomic<std::int64_t> last_used_ms{0};
  // Creation order (make_resident numbers matrices from 1): a request naming several matrices
  // locks them in this order. A new matrix is locked while its operands are held (its creation
  // and its reply), so locking in address order could close a cycle that absl's deadlock
  // detector aborts on; creation order never does.
  std::uint64_t serial = 0;
  // Operations holding a ResidentLock on it now: a matrix in use is not idle, so the TTL sweep
  // skips it, and its idle time starts again when the last use ends.
  std::atomic<int> users{0};
  // Set for a matrix created empty and written range by range (CreateResident, WriteRange): no
  // operation may use it until every byte has arrived. Null for matrices made whole.
  std::unique_ptr<RangeFill> fill;

  // The fp8 kernels read K-major operands only. The first fp8 product that reads this e4m3
  // matrix the other way round keeps a transposed copy of it here (of its row-major view: cols x
  // rows, made on the device in that product's timing), and later products read the copy instead
  // of repacking the matrix. Same device and pool; freed with the matrix or by an in-place
  // transpose.
  mutable absl::Mutex transposed_mu;
  MemoryPool::Block transposed ABSL_GUARDED_BY(transposed_mu);

  std::size_t bytes() const { return block.size(); }
  bool usable() const { return fill == nullptr || fill->complete(); }
  // The pool capacity the transposed copy takes (0 when there is none).
  std::size_t transposed_capacity() const {
    absl::MutexLock lock(&transposed_mu);
    return transposed.capacity();
  }
  // The transposed copy's bytes, or null when there is none.
  const void* transposed_data() const {
    absl::MutexLock lock(&transposed_mu);
    return transposed.data();
  }
  // Keeps `copy` as the transposed copy, unless another product kept one first (then `copy` goes
  // back to the pool).
  void keep_transposed(MemoryPool::Block copy) {
    absl::MutexLock lock(&transposed_mu);
    if (transposed.data() == nullptr) transposed = std::move(copy);
  }
  // The matrix's bytes changed (an in-place transpose): the copy no longer matches.
  void drop_transposed() {
    MemoryPool::Block gone;
    absl::MutexLock lock(&transposed_mu);
    std::swap(gone, transposed);
  }
};

struct ResidentStats {
  std::int64_t count = 0;
  std::int64_t bytes = 0;
  std::int64_t expired_total = 0;
};

class ResidentStore;

// Bytes of an owner's quota held for a resident matrix being made (an upload in progress, a result
// being computed), from the moment the request is accepted until it ends; then the published
// matrix counts instead (both count for an instant, never neither). Move-only; empty when no
// quota applies.
class QuotaReservation {
 public:
  QuotaReservation() = default;
  QuotaReservation(QuotaReservation&& o) noexcept;
  QuotaReservation& operator=(QuotaReservation&& o) noexcept;
  QuotaReservation(const QuotaReservation&) = delete;
  QuotaReservation& operator=(const QuotaReservation&) = delete;
  ~QuotaReservation() { reset(); }
  void reset();

 private:
  friend class ResidentStore;
  QuotaReservation(ResidentStore* store, std::string owner, std::int64_t bytes)
      : store_(store), owner_(std::move(owner)), bytes_(bytes) {}
  ResidentStore* store_ = nullptr;
  std::string owner_;
  std::int64_t bytes_ = 0;
};

class ResidentStore {
 public:
  explicit ResidentStore(absl::Duration idle_ttl);

  // The replica id put in every handle made from now on (check_replica_id'd by the caller; set
  // before the server takes calls); empty: bare handles.
  void set_replica_id(std::string id);
  std::string replica_id() const;
  // Gives `m` a fresh handle and keeps it; returns the handle.
  std::string add(std::shared_ptr<ResidentMatrix> m);
  // NOT_FOUND (naming `field`) when the handle is unknown, released, expired or another owner's
  // (naming the replica too when the handle is another replica's);
  // FAILED_PRECONDITION (naming the bytes still missing) while the matrix is being filled.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> get(const std::string& field,
                                                      const std::string& handle,
                                                      const std::string& owner);
  // As get, but a matrix being filled is returned too (to write its ranges, or to place a new
  // matrix beside it).
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> find(const std::string& field,
                                                       const std::string& handle,
                                                       const std::string& owner);
  // Forgets the handle; its memory returns to the pool once no operation uses it. Bytes freed.
  absl::StatusOr<std::int64_t> release(const std::string& handle, const std::string& owner);
  std::vector<std::shared_ptr<ResidentMatrix>> list(const std::string& owner) const;
  // Swaps `block` (same size) with `m`'s own: `block` then holds the old memory. The caller holds
  // m's lock exclusively (no operation reads the old block); the store's lock covers its own
  // accounting, which reads the block's size.
  void replace_block(ResidentMatrix& m, MemoryPool::Block& block);
  // Matrices being filled that receive no range for this long are released (a client that went
  // away mid-transfer leaves nothing behind); zero or less: the TTL applies to them too.
  void set_fill_timeout(absl::Duration timeout);
  // Releases matrices idle longer than the TTL (being filled: the fill timeout) and not in use;
  // returns how many.
  int sweep();
  // Releases everything (shutdown).
  void clear();

  ResidentStats stats() const;
  // Bytes of the resident matrices `owner` holds (published ones, their kept transposed copies
  // included).
  std::int64_t bytes_of(const std::string& owner) const;
  // What `owner` may still take under `limit` (held and reserved bytes subtracted, at least 0);
  // max when `limit` <= 0 (no limit).
  std::int64_t room_of(const std::string& owner, std::int64_t limit) const;
  // Reserves a new matrix of `bytes` (counted as its pool size class, as published ones are)
  // against `owner`'s `limit`, atomically with every other reservation: RESOURCE_EXHAUSTED naming
  // --max_resident_bytes_per_owner when held + reserved + this would pass it. `limit` <= 0 or
  // `bytes` == 0: no quota, an empty reservation.
  absl::StatusOr<QuotaReservation> reserve(const std::string& owner, std::int64_t bytes,
                                           std::int64_t limit);
  absl::Duration ttl() const { return ttl_; }
  // Milliseconds until `m` expires if it stays idle.
  std::int64_t expires_in_ms(const ResidentMatrix& m) const;

 private:
  const absl::Duration ttl_;
  std::atomic<std::int64_t> fill_timeout_ms_{0};
  mutable absl::Mutex mu_;
  std::string replica_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<ResidentMatrix>> by_handle_ ABSL_GUARDED_BY(mu_);
  std::int64_t expired_total_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::int64_t> reserved_ ABSL_GUARDED_BY(mu_);  // by owner

  friend class QuotaReservation;
  void unreserve(const std::string& owner, std::int64_t bytes);
  absl::Status not_found(const std::string& field, const std::string& handle) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::int64_t bytes_of_locked(const std::string& owner) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes reserved for `owner` by requests in progress.
  std::int64_t reserved_locked(const std::string& owner) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The idle time after which `m` is released: the TTL, or the fill timeout while it fills.
  std::int64_t idle_limit_ms(const ResidentMatrix& m) const;
};

// Whether `o` is a resident matrix kept in host memory (ResidentMatrix::in_host_memory).
inline bool in_host_memory(const Operand& o) {
  return o.resident != nullptr && o.resident->in_host_memory;
}

// Where `o`'s bytes are: its resident matrix's memory, or the request's bytes when inline.
inline const void* operand_bytes(const Operand& o) {
  return o.is_resident() ? static_cast<const std::byte*>(o.resident->block.data()) + o.offset
                         : o.data.data();
}

// A resident matrix over `block` (not yet published: no handle).
std::shared_ptr<ResidentMatrix> make_resident(MemoryPool::Block block, std::int64_t rows,
                                              std::int64_t cols, kernels::DType dtype,
                                              kernels::Layout layout, const std::string& owner,
                                              int device, const std::string& label);

// Milliseconds on a monotonic clock, for idle times.
std::int64_t monotonic_ms();

}  // namespace matserve::server
