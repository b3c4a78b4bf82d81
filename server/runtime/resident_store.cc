// Resident matrices: see resident_store.h.
#include "server/runtime/resident_store.h"

#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/runtime/quote.h"
#include "server/runtime/replica_handle.h"

namespace matserve::server {
namespace {

// 128 bits from the kernel's CSPRNG, as 32 hex digits. The bytes are drawn 4 KiB at a time into
// a per-thread buffer (one getrandom call per 256 handles instead of one per handle: a syscall
// is microseconds on the request path); every handle still takes fresh, unused kernel random
// bytes, and they never leave this thread's memory before they become the handle.
std::string new_handle() {
  thread_local unsigned char pool[4096];
  thread_local std::size_t used = sizeof pool;
  if (used + 16 > sizeof pool) {
    std::size_t got = 0;
    while (got < sizeof pool) {
      const ssize_t n = getrandom(pool + got, sizeof pool - got, 0);
      if (n > 0) got += static_cast<std::size_t>(n);
    }
    used = 0;
  }
  const unsigned char* bytes = pool + used;
  used += 16;
  std::string hex;
  hex.reserve(32);
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    hex.push_back(kDigits[bytes[i] >> 4]);
    hex.push_back(kDigits[bytes[i] & 15]);
  }
  return hex;
}

}  // namespace

absl::Status ResidentStore::not_found(const std::string& field, const std::string& handle) const {
  if (const std::optional<std::string_view> replica = handle_replica(handle);
      replica && *replica != replica_id_) {
    return absl::NotFoundError(absl::StrCat(
        field, ": no resident matrix ", quote(handle), " on this replica (", quote(replica_id_),
        "): the handle names replica ", quote(*replica), "; send calls naming it there"));
  }
  return absl::NotFoundError(absl::StrCat(field, ": no resident matrix ", quote(handle),
                                          " (never created, released, or expired)"));
}

std::shared_ptr<ResidentMatrix> make_resident(MemoryPool::Block block, std::int64_t rows,
                                              std::int64_t cols, kernels::DType dtype,
                                              kernels::Layout layout, const std::string& owner,
                                              int device, const std::string& label) {
  static std::atomic<std::uint64_t> next_serial{1};
  auto m = std::make_shared<ResidentMatrix>();
  m->serial = next_serial.fetch_add(1, std::memory_order_relaxed);
  m->owner = owner;
  m->device = device;
  m->device_label = label;
  m->block = std::move(block);
  absl::MutexLock lock(&m->mu);
  m->rows = rows;
  m->cols = cols;
  m->dtype = dtype;
  m->layout = layout;
  return m;
}

std::int64_t monotonic_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ResidentStore::ResidentStore(absl::Duration idle_ttl) : ttl_(idle_ttl) {}

void ResidentStore::set_replica_id(std::string id) {
  absl::MutexLock lock(&mu_);
  replica_id_ = std::move(id);
}

std::string ResidentStore::replica_id() const {
  absl::MutexLock lock(&mu_);
  return replica_id_;
}

std::string ResidentStore::add(std::shared_ptr<ResidentMatrix> m) {
  const std::string secret = new_handle();
  m->last_used_ms.store(monotonic_ms());
  absl::MutexLock lock(&mu_);
  m->handle = make_handle(replica_id_, secret);
  std::string handle = m->handle;
  by_handle_.emplace(handle, std::move(m));
  return handle;
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> ResidentStore::get(const std::string& field,
                                                                   const std::string& handle,
                                                                   const std::string& owner) {
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> m = find(field, handle, owner);
  if (!m.ok() || (*m)->usable()) return m;
  const RangeFill& fill = *(*m)->fill;
  const std::uint64_t written = fill.written();
  return absl::FailedPreconditionError(absl::StrCat(
      field, ": resident matrix ", quote(handle), " is still being filled: ",
      fill.total() - written, " of its ", fill.total(), " bytes have not arrived (WriteRange)"));
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> ResidentStore::find(const std::string& field,
                                                                    const std::string& handle,
                                                                    const std::string& owner) {
  absl::MutexLock lock(&mu_);
  auto it = by_handle_.find(handle);
  // Another owner's handle is reported exactly like a missing one: existence does not leak.
  if (it == by_handle_.end() || it->second->owner != owner) return not_found(field, handle);
  it->second->last_used_ms.store(monotonic_ms());
  return it->second;
}

absl::StatusOr<std::int64_t> ResidentStore::release(const std::string& handle,
                                                    const std::string& owner) {
  absl::MutexLock lock(&mu_);
  auto it = by_handle_.find(handle);
  if (it == by_handle_.end() || it->second->owner != owner) return not_found("handle", handle);
  const auto bytes = static_cast<std::int64_t>(it->second->block.capacity());
  by_handle_.erase(it);
  return bytes;
}

void ResidentStore::replace_block(ResidentMatrix& m, MemoryPool::Block& block) {
  absl::MutexLock lock(&mu_);
  std::swap(m.block, block);
}

std::vector<std::shared_ptr<ResidentMatrix>> ResidentStore::list(const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<ResidentMatrix>> out;
  for (const auto& [handle, m] : by_handle_) {
    if (m->owner == owner) out.push_back(m);
  }
  return out;
}

void ResidentStore::set_fill_timeout(absl::Duration timeout) {
  fill_timeout_ms_.store(absl::ToInt64Milliseconds(timeout));
}

std::int64_t ResidentStore::idle_limit_ms(const ResidentMatrix& m) const {
  const std::int64_t fill_timeout = fill_timeout_ms_.load();
  if (fill_timeout > 0 && !m.usable()) return fill_timeout;
  return absl::ToInt64Milliseconds(ttl_);
}

int ResidentStore::sweep() {
  const std::int64_t now = monotonic_ms();
  absl::MutexLock lock(&mu_);
  int removed = 0;
  for (auto it = by_handle_.begin(); it != by_handle_.end();) {
    const ResidentMatrix& m = *it->second;
    if (m.users.load() == 0 && now - m.last_used_ms.load() > idle_limit_ms(m)) {
      by_handle_.erase(it++);
      ++removed;
    } else {
      ++it;
    }
  }
  expired_total_ += removed;
  return removed;
}

void ResidentStore::clear() {
  absl::MutexLock lock(&mu_);
  by_handle_.clear();
}

ResidentStats ResidentStore::stats() const {
  absl::MutexLock lock(&mu_);
  ResidentStats s;
  s.count = static_cast<std::int64_t>(by_handle_.size());
  for (const auto& [handle, m] : by_handle_) {
    s.bytes += static_cast<std::int64_t>(m->bytes() + m->transposed_capacity());
  }
  s.expired_total = expired_total_;
  return s;
}

std::int64_t ResidentStore::bytes_of(const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  return bytes_of_locked(owner);
}

std::int64_t ResidentStore::bytes_of_locked(const std::string& owner) const {
  std::int64_t total = 0;
  for (const auto& [handle, m] : by_handle_) {
    if (m->owner == owner) {
      total += static_cast<std::int64_t>(m->block.capacity() + m->transposed_capacity());
    }
  }
  return total;
}

std::int64_t ResidentStore::reserved_locked(const std::string& owner) const {
  auto it = reserved_.find(owner);
  return it == reserved_.end() ? 0 : it->second;
}

std::int64_t ResidentStore::room_of(const std::string& owner, std::int64_t limit) const {
  if (limit <= 0) return std::numeric_limits<std::int64_t>::max();
  absl::MutexLock lock(&mu_);
  return std::max<std::int64_t>(0, limit - bytes_of_locked(owner) - reserved_locked(owner));
}

absl::StatusOr<QuotaReservation> ResidentStore::reserve(const std::string& owner,
                                                        std::int64_t bytes, std::int64_t limit) {
  if (limit <= 0 || bytes <= 0) return QuotaReservation();
  const auto counted =
      static_cast<std::int64_t>(MemoryPool::size_class(static_cast<std::size_t>(bytes)));
  absl::MutexLock lock(&mu_);
  const std::int64_t held = bytes_of_locked(owner);
  const std::int64_t pending = reserved_locked(owner);
  if (held + pending + counted > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "resident matrices of this caller would take ", held + pending + counted,
        " bytes, over the limit of ", limit, " per caller (--max_resident_bytes_per_owner; ", held,
        " held now, ", pending, " reserved by requests in progress)"));
  }
  reserved_[owner] += counted;
  return QuotaReservation(this, owner, counted);
}

void ResidentStore::unreserve(const std::string& owner, std::int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = reserved_.find(owner);
  if (it == reserved_.end()) return;
  it->second -= bytes;
  if (it->second <= 0) reserved_.erase(it);
}

QuotaReservation::QuotaReservation(QuotaReservation&& o) noexcept
    : store_(std::exchange(o.store_, nullptr)),
      owner_(std::move(o.owner_)),
      bytes_(std::exchange(o.bytes_, 0)) {}

QuotaReservation& QuotaReservation::operator=(QuotaReservation&& o) noexcept {
  if (this != &o) {
    reset();
    store_ = std::exchange(o.store_, nullptr);
    owner_ = std::move(o.owner_);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void QuotaReservation::reset() {
  if (store_ != nullptr) store_->unreserve(owner_, bytes_);
  store_ = nullptr;
  bytes_ = 0;
}

std::int64_t ResidentStore::expires_in_ms(const ResidentMatrix& m) const {
  const std::int64_t left = idle_limit_ms(m) - (monotonic_ms() - m.last_used_ms.load());
  return left > 0 ? left : 0;
}

}  // namespace matserve::server

namespace matserve::server {

ResidentLock::ResidentLock(std::shared_ptr<ResidentMatrix> m, bool exclusive)
    : m_(std::move(m)), exclusive_(exclusive) {
  m_->users.fetch_add(1);
  if (exclusive_) {
    m_->mu.WriterLock();
  } else {
    m_->mu.ReaderLock();
  }
}

ResidentLock::ResidentLock(ResidentLock&& o) noexcept
    : m_(std::move(o.m_)), exclusive_(o.exclusive_) {}

ResidentLock::~ResidentLock() {
  if (m_ == nullptr) return;
  if (exclusive_) {
    m_->mu.WriterUnlock();
  } else {
    m_->mu.ReaderUnlock();
  }
  // Idle from now on: the clock restarts before the use count can let the sweep see it.
  m_->last_used_ms.store(monotonic_ms());
  m_->users.fetch_sub(1);
}

}  // namespace matserve::server
