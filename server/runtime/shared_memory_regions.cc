// Shared-memory regions: see shared_memory_regions.h.
#include "server/runtime/shared_memory_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/runtime/quote.h"

namespace matserve::server {
namespace {

using absl::StrCat;

constexpr std::size_t kMaxNameBytes = 128;
constexpr std::size_t kMaxKeyBytes = 255;

absl::Status check_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        StrCat("name: must be 1-", kMaxNameBytes, " characters (got ", name.size(), ")"));
  }
  for (char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          StrCat("name: ", quote(name), " has a character outside [A-Za-z0-9_.-]"));
    }
  }
  return absl::OkStatus();
}

absl::Status check_key(const std::string& key) {
  if (key.size() < 2 || key.size() > kMaxKeyBytes || key[0] != '/' ||
      key.find('/', 1) != std::string::npos || key.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("key: must be a POSIX shared-memory name, '/' then 1-", kMaxKeyBytes - 1,
               " characters without '/' (as given to shm_open; got ", quote(key), ")"));
  }
  return absl::OkStatus();
}

absl::Status open_error(const std::string& key, int err) {
  const std::string why = std::strerror(err);
  if (err == ENOENT) {
    return absl::NotFoundError(StrCat("key: no shared-memory object ", quote(key),
                                      " on the server's node (create it with shm_open first; the "
                                      "client must share the server's /dev/shm)"));
  }
  if (err == EACCES || err == EPERM) {
    return absl::PermissionDeniedError(StrCat("key: the server may not open ", quote(key),
                                              " for reading and writing (", why, ")"));
  }
  return absl::InvalidArgumentError(StrCat("key: cannot open ", quote(key), ": ", why));
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegion::open(
    SharedMemoryRegionInfo info, const HostPinner& pin, const OpenChecks& checks) {
  auto r = std::make_shared<SharedMemoryRegion>(Private{});
  r->info_ = std::move(info);
  const SharedMemoryRegionInfo& i = r->info_;
  if (absl::Status s = shm_fault_guard::install(); !s.ok()) return s;
  r->fd_ = ::shm_open(i.key.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (r->fd_ < 0) return open_error(i.key, errno);
  struct stat st = {};
  if (::fstat(r->fd_, &st) != 0) return open_error(i.key, errno);
  r->object_ = {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        StrCat("key: ", quote(i.key), " is not a shared-memory object"));
  }
  if (!checks.allow_other_uids && st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(StrCat(
        "key: ", quote(i.key), " belongs to uid ", st.st_uid, ", the server runs as uid ",
        ::geteuid(), "; objects of other users are refused (--shared_memory_allow_other_uids)"));
  }
  if (i.offset > st.st_size || i.byte_size > st.st_size - i.offset) {
    return absl::InvalidArgumentError(StrCat("byte_size: offset ", i.offset, " + byte_size ",
                                             i.byte_size, " exceeds the ", st.st_size, " bytes of ",
                                             quote(i.key)));
  }
  if (checks.possession && i.byte_size < static_cast<std::int64_t>(ShmNonces::kBytes)) {
    return absl::InvalidArgumentError(StrCat(
        "byte_size: a shared-memory region holds at least ", ShmNonces::kBytes,
        " bytes (the registration nonce is written into its first bytes; got ", i.byte_size, ")"));
  }
  const auto page = static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE));
  const std::int64_t start = i.offset / page * page;
  r->mapping_bytes_ = static_cast<std::size_t>(i.offset - start + i.byte_size);
  void* m = ::mmap(nullptr, r->mapping_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd_, start);
  if (m == MAP_FAILED) {
    return absl::ResourceExhaustedError(StrCat("byte_size: cannot map ", i.byte_size, " bytes of ",
                                               quote(i.key), ": ", std::strerror(errno)));
  }
  r->mapping_ = m;
  r->base_ = static_cast<std::byte*>(m) + (i.offset - start);
  absl::StatusOr<shm_fault_guard::Range> guard =
      shm_fault_guard::Range::guard(r->mapping_, r->mapping_bytes_);
  if (!guard.ok()) return guard.status();
  r->guard_ = *std::move(guard);
  if (checks.possession) {
    // Read through the guarded mapping: an object truncated meanwhile reads as zeros.
    if (absl::Status s = checks.possession(r->bytes()); !s.ok()) return s;
    if (absl::Status s = r->check_not_faulted(); !s.ok()) return s;
  }
  if (pin) {
    // Whole pages: the driver pins pages, and the range may start inside one.
    const auto pages = static_cast<std::size_t>(
        (static_cast<std::int64_t>(r->mapping_bytes_) + page - 1) / page * page);
    r->pin_ = pin({static_cast<std::byte*>(r->mapping_), pages});
  }
  r->info_.pinned = r->pin_ != nullptr;
  return r;
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegion::on_device(
    SharedMemoryRegionInfo info, OpenedDeviceMemory memory) {
  const auto size = static_cast<std::int64_t>(memory.bytes);
  if (info.offset > size || info.byte_size > size - info.offset) {
    return absl::InvalidArgumentError(StrCat("byte_size: offset ", info.offset, " + byte_size ",
                                             info.byte_size, " exceeds the ", size,
                                             " bytes of the exported allocation"));
  }
  auto r = std::make_shared<SharedMemoryRegion>(Private{});
  r->info_ = std::move(info);
  r->info_.key.clear();
  r->info_.device = memory.label;
  r->base_ = memory.base + r->info_.offset;
  // Apart from every (st_dev, st_ino): device numbers never reach the top bit.
  r->object_ = {(std::uint64_t{1} << 63) | static_cast<std::uint64_t>(memory.device),
                reinterpret_cast<std::uintptr_t>(memory.base)};
  r->device_ = std::move(memory);
  return r;
}

SharedMemoryRegion::~SharedMemoryRegion() {
  pin_.reset();                       // unpin while the pages are still mapped
  guard_ = shm_fault_guard::Range();  // no fault can come from the range after this
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

absl::Status SharedMemoryRegion::truncated_error() const {
  return absl::FailedPreconditionError(
      StrCat("shared-memory region ", quote(info_.name), ": the object ", quote(info_.key),
             " no longer holds its registered ", info_.byte_size,
             " bytes (it was truncated); unregister it and register it again"));
}

absl::Status SharedMemoryRegion::check_not_faulted() const {
  return guard_.faulted() ? truncated_error() : absl::OkStatus();
}

absl::Status SharedMemoryRegion::check_intact() const {
  if (is_device()) return absl::OkStatus();  // the client's allocation, open until unregistered
  struct stat st = {};
  const bool shrank = ::fstat(fd_, &st) != 0 || st.st_size < info_.offset + info_.byte_size;
  return shrank ? truncated_error() : check_not_faulted();
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegistry::insert(
    const std::string& owner, const std::string& name, std::int64_t offset, std::int64_t byte_size,
    std::int64_t host_bytes, const Opener& open) {
  if (absl::Status s = check_name(name); !s.ok()) return s;
  if (offset < 0) {
    return absl::InvalidArgumentError(StrCat("offset: must be >= 0 (got ", offset, ")"));
  }
  if (byte_size < 1) {
    return absl::InvalidArgumentError(StrCat("byte_size: must be >= 1 (got ", byte_size, ")"));
  }
  const auto taken = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (regions_.contains(Key(owner, name))) {
      return absl::AlreadyExistsError(
          StrCat("name: a region ", quote(name), " is registered already (unregister it first)"));
    }
    int mine = 0;
    for (const auto& [key, region] : regions_) mine += key.first == owner ? 1 : 0;
    if (mine >= max_per_owner_) {
      return absl::ResourceExhaustedError(
          StrCat("name: ", mine, " regions are registered, the limit per caller is ",
                 max_per_owner_, " (--max_shm_regions_per_owner)"));
    }
    return absl::OkStatus();
  };
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = taken(); !s.ok()) return s;
    if (absl::Status s = reserve_bytes(owner, host_bytes); !s.ok()) return s;
  }
  // Mapping, pinning or opening can take a while for large regions: not under the lock.
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> region = open();
  absl::Status s;
  {
    absl::MutexLock lock(&mu_);
    s = region.ok() ? taken() : region.status();  // taken: a concurrent registration won
    if (s.ok()) {
      regions_[Key(owner, name)] = *region;
      return region;
    }
    release_bytes(owner, host_bytes);
  }
  return s;  // a region opened in vain is unmapped outside the lock
}

absl::Status SharedMemoryRegistry::reserve_bytes(const std::string& owner, std::int64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  std::int64_t& mine = bytes_by_owner_[owner];
  // Written as subtractions: byte_size may be near 2^63.
  if (bytes > max_bytes_per_owner_ - mine) {
    const std::int64_t had = mine;
    if (mine == 0) bytes_by_owner_.erase(owner);
    return absl::ResourceExhaustedError(
        StrCat("byte_size: ", bytes,
               " bytes more would bring this caller's registered shared "
               "memory to more than the limit of ",
               max_bytes_per_owner_, " bytes (--max_shared_memory_bytes_per_owner; ", had,
               " registered)"));
  }
  if (bytes > max_bytes_ - bytes_) {
    if (mine == 0) bytes_by_owner_.erase(owner);
    return absl::ResourceExhaustedError(StrCat(
        "byte_size: ", bytes,
        " bytes more would bring the server's registered shared "
        "memory to more than the limit of ",
        max_bytes_, " bytes (--max_shared_memory_bytes; ", bytes_, " registered by all callers)"));
  }
  mine += bytes;
  bytes_ += bytes;
  return absl::OkStatus();
}

void SharedMemoryRegistry::release_bytes(const std::string& owner, std::int64_t bytes) {
  if (bytes == 0) return;
  auto it = bytes_by_owner_.find(owner);
  if (it == bytes_by_owner_.end()) return;
  it->second -= bytes;
  bytes_ -= bytes;
  if (it->second <= 0) bytes_by_owner_.erase(it);
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegistry::add(
    const std::string& owner, SharedMemoryRegionInfo info) {
  if (absl::Status s = check_key(info.key); !s.ok()) return s;
  const std::string name = info.name, key = info.key;
  const std::int64_t offset = info.offset, byte_size = info.byte_size;
  OpenChecks checks;
  {
    absl::MutexLock lock(&mu_);
    checks.allow_other_uids = allow_other_uids_;
  }
  checks.possession = [&](std::span<const std::byte> bytes) -> absl::Status {
    const absl::Time now = absl::Now();
    if (nonces_.redeem(owner, key, bytes, now)) return absl::OkStatus();
    absl::Status s = absl::FailedPreconditionError(StrCat(
        "key: the first ", ShmNonces::kBytes, " bytes of the range of ", quote(key), " at offset ",
        offset,
        " do not hold this caller's registration nonce: write the nonce "
        "from the trailing metadata '",
        kShmNonceMetadataKey,
        "' there and register again (it proves that the caller may write the object; restore "
        "the bytes afterwards)"));
    s.SetPayload(kShmNonceMetadataKey, absl::Cord(nonces_.issue(owner, key, now)));
    return s;
  };
  return insert(owner, name, offset, byte_size, byte_size,
                [&] { return SharedMemoryRegion::open(std::move(info), pin_, checks); });
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegistry::add_device(
    const std::string& owner, SharedMemoryRegionInfo info, const DeviceOpener& open) {
  const std::string name = info.name;
  const std::int64_t offset = info.offset, byte_size = info.byte_size;
  return insert(owner, name, offset, byte_size, 0,
                [&]() -> absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> {
                  absl::StatusOr<OpenedDeviceMemory> memory = open();
                  if (!memory.ok()) return memory.status();
                  return SharedMemoryRegion::on_device(std::move(info), *std::move(memory));
                });
}

absl::StatusOr<int> SharedMemoryRegistry::remove(const std::string& owner,
                                                 const std::string& name) {
  std::vector<std::shared_ptr<SharedMemoryRegion>> gone;  // unmapped outside the lock
  absl::MutexLock lock(&mu_);
  if (!name.empty()) {
    auto it = regions_.find(Key(owner, name));
    if (it == regions_.end()) {
      return absl::NotFoundError(StrCat("name: no region ", quote(name), " is registered"));
    }
    release_bytes(owner, it->second->host_bytes());
    gone.push_back(std::move(it->second));
    regions_.erase(it);
    return 1;
  }
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (it->first.first == owner) {
      release_bytes(owner, it->second->host_bytes());
      gone.push_back(std::move(it->second));
      regions_.erase(it++);
    } else {
      ++it;
    }
  }
  return static_cast<int>(gone.size());
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegistry::find(
    const std::string& owner, const std::string& name, const std::string& field) const {
  std::shared_ptr<SharedMemoryRegion> region;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = regions_.find(Key(owner, name));
    if (it != regions_.end()) region = it->second;
  }
  if (region == nullptr) {
    return absl::NotFoundError(StrCat(field, ": no shared-memory region ", quote(name),
                                      " is registered (RegisterSharedMemory)"));
  }
  if (absl::Status s = region->check_intact(); !s.ok()) {
    return absl::FailedPreconditionError(StrCat(field, ": ", s.message()));
  }
  return region;
}

std::vector<SharedMemoryRegionInfo> SharedMemoryRegistry::list(const std::string& owner) const {
  std::vector<SharedMemoryRegionInfo> out;
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [key, region] : regions_) {
    if (key.first == owner) out.push_back(region->info());
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
  return out;
}

}  // namespace matserve::server
