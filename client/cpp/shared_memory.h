// A POSIX shared-memory object this process creates, maps and (when it goes away) unmaps and
// unlinks: the client side of the server's shared-memory regions. Put operands into it, register
// it (Client::RegisterSharedMemory with key()), and name region + offset in requests instead of
// sending bytes. Works only with a server on the same node that shares /dev/shm.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace matserve::client {

class SharedMemoryObject {
 public:
  // Creates a new object of `bytes` (zero-filled). `key` ("/name"); empty: a fresh unique name.
  // ALREADY_EXISTS when `key` exists, other errors with the system's reason.
  static absl::StatusOr<SharedMemoryObject> create(std::size_t bytes, std::string key = {});

  SharedMemoryObject() = default;
  SharedMemoryObject(SharedMemoryObject&& o) noexcept { *this = std::move(o); }
  SharedMemoryObject& operator=(SharedMemoryObject&& o) noexcept;
  SharedMemoryObject(const SharedMemoryObject&) = delete;
  SharedMemoryObject& operator=(const SharedMemoryObject&) = delete;
  ~SharedMemoryObject();

  const std::string& key() const { return key_; }
  std::span<std::byte> bytes() const { return {data_, size_}; }

 private:
  void reset();

  std::string key_;
  int fd_ = -1;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace matserve::client
