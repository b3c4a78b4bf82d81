// Shared-memory regions: memory that clients on the server's node share with it, so that operands
// and results travel through memory both processes map instead of through gRPC messages. A host
// region is a POSIX shared-memory object (mapped, and pinned for DMA by the CUDA backend); a
// device region is a client's GPU allocation exported with CUDA IPC (opened by the backend, read
// and written in place). A region stays mapped for as long as it is registered and any request
// still holds it. Registrations are per owner (a token's name; "" with authentication off): one
// owner never sees another's. Host and device regions share one namespace of names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/runtime/backend.h"
#include "server/runtime/shm_fault_guard.h"
#include "server/runtime/shm_nonces.h"

namespace matserve::server {

struct SharedMemoryRegionInfo {
  std::string name;
  std::string key;  // host regions: the object's name; empty for device regions
  std::int64_t offset = 0;
  std::int64_t byte_size = 0;
  bool pinned = false;
  std::string device;  // device regions: where the memory lives ("cuda:0"); empty for host ones
};

// Pins host memory for DMA until the returned object goes away; nullptr when the backend has no
// use for it (CPU), or when pinning failed (the region then works through staging copies). It is
// given whole pages: the mapping that holds the registered range.
using HostPinner = std::function<std::shared_ptr<void>(std::span<std::byte>)>;

// What SharedMemoryRegion::open checks before it pins a host region.
struct OpenChecks {
  // Objects whose owner (st_uid) is not the server's effective uid are PERMISSION_DENIED unless
  // this is set (--shared_memory_allow_other_uids).
  bool allow_other_uids = false;
  // Called with the registered range once it is mapped (guarded), before pinning; its error is
  // open()'s. Set, a range of fewer than ShmNonces::kBytes bytes is INVALID_ARGUMENT. Empty: no
  // check.
  std::function<absl::Status(std::span<const std::byte>)> possession;
};

class SharedMemoryRegion {
 public:
  // Opens `key` (shm_open, read-write), checks that it holds offset + byte_size bytes, maps the
  // range, guards it against SIGBUS, runs `checks`, and pins it with `pin` (may be empty).
  // NOT_FOUND when the object does not exist, PERMISSION_DENIED when the server may not open it
  // or another user owns it, INVALID_ARGUMENT when it is too small or not a shared-memory object,
  // and the possession check's error.
  static absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> open(SharedMemoryRegionInfo info,
                                                                  const HostPinner& pin,
                                                                  const OpenChecks& checks = {});
  // A device region over `memory` (CUDA IPC): INVALID_ARGUMENT when offset + byte_size passes
  // the end of the exported allocation.
  static absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> on_device(SharedMemoryRegionInfo info,
                                                                       OpenedDeviceMemory memory);
  struct Private {};  // open() is the one way to make a region
  explicit SharedMemoryRegion(Private) {}
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const SharedMemoryRegionInfo& info() const { return info_; }
  bool is_device() const { return device_.device >= 0; }
  // The registered range: host memory, or device memory of device() for a device region (never
  // dereferenced on the host).
  std::span<std::byte> bytes() const { return {base_, static_cast<std::size_t>(info_.byte_size)}; }
  int device() const { return device_.device; }  // the backend's device index; -1 for host
  // The memory the region lies in, the same for every registration of it (under other names or
  // ranges): a host object's (st_dev, st_ino), a device allocation's device and base. With
  // object_offset(), where bytes() starts in it, it tells whether two places share bytes.
  struct ObjectId {
    std::uint64_t first = 0;
    std::uint64_t second = 0;
    bool operator==(const ObjectId&) const = default;
  };
  const ObjectId& object() const { return object_; }
  std::int64_t object_offset() const { return info_.offset; }
  // Host memory the region maps (byte_size; 0 for a device region): what the byte limits count.
  std::int64_t host_bytes() const { return is_device() ? 0 : info_.byte_size; }
  const std::string& device_label() const { return device_.label; }
  // OK while the object still holds the registered range and no access has hit a lost page;
  // FAILED_PRECONDITION naming the region otherwise (it must be registered again).
  absl::Status check_intact() const;
  // The part of check_intact that needs no system call: FAILED_PRECONDITION once an access hit a
  // lost page. For after a use whose range check_intact passed before it.
  absl::Status check_not_faulted() const;

 private:
  absl::Status truncated_error() const;

  SharedMemoryRegionInfo info_;
  int fd_ = -1;
  void* mapping_ = nullptr;  // page-aligned start of the mapping
  std::size_t mapping_bytes_ = 0;
  std::byte* base_ = nullptr;  // the registered range within the mapping
  ObjectId object_;
  shm_fault_guard::Range guard_;
  std::shared_ptr<void> pin_;
  OpenedDeviceMemory device_;  // device regions only
};

class SharedMemoryRegistry {
 public:
  explicit SharedMemoryRegistry(HostPinner pin) : pin_(std::move(pin)) {}

  // Regions one owner may hold at once (--max_shm_regions_per_owner; default 64).
  void set_max_regions_per_owner(int n) {
    absl::MutexLock lock(&mu_);
    max_per_owner_ = n;
  }
  // Bytes of host regions (their byte_size: what the server maps, and the CUDA backend pins) one
  // owner, and all owners together, may have registered at once
  // (--max_shared_memory_bytes_per_owner,
  // --max_shared_memory_bytes). Device regions map no host memory and do not count.
  void set_max_bytes(std::int64_t per_owner, std::int64_t total) {
    absl::MutexLock lock(&mu_);
    max_bytes_per_owner_ = per_owner;
    max_bytes_ = total;
  }

  // Objects of users other than the server's own accepted (--shared_memory_allow_other_uids).
  void set_allow_other_uids(bool allow) {
    absl::MutexLock lock(&mu_);
    allow_other_uids_ = allow;
  }

  // Registers a region under (owner, info.name): INVALID_ARGUMENT for a malformed name, key,
  // offset or size, ALREADY_EXISTS when the owner has that name, RESOURCE_EXHAUSTED past
  // max_regions_per_owner or either byte limit (checked before the object is opened), and
  // SharedMemoryRegion::open's errors. Possession: the first ShmNonces::kBytes bytes of the range
  // must hold the nonce this owner was issued for this key; when they do not, FAILED_PRECONDITION
  // carrying a (new or still valid) nonce as the payload kShmNonceMetadataKey, which the caller
  // writes there before it registers again (a range shorter than a nonce is INVALID_ARGUMENT).
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> add(const std::string& owner,
                                                          SharedMemoryRegionInfo info);
  // Registers a device region: `open` opens the client's memory (called outside the lock, after
  // the name and limit checks). The same errors as add, and those of `open`.
  using DeviceOpener = std::function<absl::StatusOr<OpenedDeviceMemory>()>;
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> add_device(const std::string& owner,
                                                                 SharedMemoryRegionInfo info,
                                                                 const DeviceOpener& open);
  // Unregisters `name` (NOT_FOUND when the owner has none), or all the owner's when `name` is
  // empty; returns how many. Requests that hold a region keep it mapped until they finish.
  absl::StatusOr<int> remove(const std::string& owner, const std::string& name);
  // The owner's region `name`, intact; NOT_FOUND (naming `field`) when it has none.
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> find(const std::string& owner,
                                                           const std::string& name,
                                                           const std::string& field) const;
  std::vector<SharedMemoryRegionInfo> list(const std::string& owner) const;

 private:
  using Key = std::pair<std::string, std::string>;  // owner, name
  using Opener = std::function<absl::StatusOr<std::shared_ptr<SharedMemoryRegion>>()>;
  // The checks both kinds share, then `open` outside the lock, then the insertion. `host_bytes`
  // (byte_size of a host region, 0 for a device one) is reserved against the byte limits before
  // `open` and given back when the region goes.
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> insert(
      const std::string& owner, const std::string& name, std::int64_t offset,
      std::int64_t byte_size, std::int64_t host_bytes, const Opener& open);
  absl::Status reserve_bytes(const std::string& owner, std::int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void release_bytes(const std::string& owner, std::int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  HostPinner pin_;
  mutable absl::Mutex mu_;
  int max_per_owner_ ABSL_GUARDED_BY(mu_) = 64;
  bool allow_other_uids_ ABSL_GUARDED_BY(mu_) = false;
  ShmNonces nonces_;  // issued by add(); has its own lock
  std::int64_t max_bytes_per_owner_ ABSL_GUARDED_BY(mu_) = std::int64_t{64} << 30;
  std::int64_t max_bytes_ ABSL_GUARDED_BY(mu_) = std::int64_t{256} << 30;
  // Host bytes registered (or reserved by a registration under way), per owner and in all.
  absl::flat_hash_map<std::string, std::int64_t> bytes_by_owner_ ABSL_GUARDED_BY(mu_);
  std::int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<Key, std::shared_ptr<SharedMemoryRegion>> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matserve::server
