// POSIX shared-memory objects owned by the client: see shared_memory.h.
#include "client/cpp/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace matserve::client {
namespace {

std::string unique_key() {
  static std::atomic<unsigned> serial{0};
  std::random_device random;
  return absl::StrCat("/matserve-", ::getpid(), "-", serial++, "-", random());
}

}  // namespace

absl::StatusOr<SharedMemoryObject> SharedMemoryObject::create(std::size_t bytes, std::string key) {
  if (bytes == 0) return absl::InvalidArgumentError("shared memory: size must be >= 1 byte");
  SharedMemoryObject o;
  o.key_ = key.empty() ? unique_key() : std::move(key);
  o.fd_ = ::shm_open(o.key_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (o.fd_ < 0) {
    const int err = errno;
    std::string key_copy = o.key_;
    o.key_.clear();  // not ours: nothing to unlink
    const std::string why = absl::StrCat("shm_open(", key_copy, "): ", std::strerror(err));
    return err == EEXIST ? absl::AlreadyExistsError(why) : absl::UnavailableError(why);
  }
  if (::ftruncate(o.fd_, static_cast<off_t>(bytes)) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("ftruncate(", o.key_, ", ", bytes, "): ", std::strerror(errno)));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, o.fd_, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mmap(", o.key_, ", ", bytes, "): ", std::strerror(errno)));
  }
  o.data_ = static_cast<std::byte*>(p);
  o.size_ = bytes;
  return o;
}

SharedMemoryObject& SharedMemoryObject::operator=(SharedMemoryObject&& o) noexcept {
  if (this != &o) {
    reset();
    key_ = std::move(o.key_);
    fd_ = o.fd_;
    data_ = o.data_;
    size_ = o.size_;
    o.key_.clear();
    o.fd_ = -1;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

SharedMemoryObject::~SharedMemoryObject() {
  reset();
}

void SharedMemoryObject::reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  if (!key_.empty()) ::shm_unlink(key_.c_str());
  key_.clear();
  fd_ = -1;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace matserve::client
