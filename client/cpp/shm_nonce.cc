// The client's part of the server's possession check: see shm_nonce.h.
#include "client/cpp/shm_nonce.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace matserve::client {

absl::Mutex& registration_mutex() {
  ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
  return mu;
}

absl::StatusOr<WrittenNonce> WrittenNonce::write(const std::string& key, std::int64_t offset,
                                                 std::string_view nonce) {
  WrittenNonce w;
  w.fd_ = ::shm_open(key.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (w.fd_ < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("shared memory: cannot open ", key,
                     " to write the server's registration nonce: ", std::strerror(errno)));
  }
  w.offset_ = offset;
  w.saved_.assign(nonce.size(), '\0');
  const ssize_t got = ::pread(w.fd_, w.saved_.data(), w.saved_.size(), offset);
  if (got != static_cast<ssize_t>(nonce.size())) {
    const std::string why = got < 0 ? std::strerror(errno) : "the object ends before";
    w.saved_.clear();  // nothing written: nothing to put back
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory: cannot read ", nonce.size(), " bytes at offset ", offset,
                     " of ", key, " to write the server's registration nonce there: ", why));
  }
  if (::pwrite(w.fd_, nonce.data(), nonce.size(), offset) != static_cast<ssize_t>(nonce.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory: cannot write the server's registration nonce at offset ",
                     offset, " of ", key, ": ", std::strerror(errno)));
  }
  return w;
}

WrittenNonce& WrittenNonce::operator=(WrittenNonce&& o) noexcept {
  if (this != &o) {
    restore();
    fd_ = std::exchange(o.fd_, -1);
    offset_ = o.offset_;
    saved_ = std::move(o.saved_);
  }
  return *this;
}

void WrittenNonce::restore() {
  if (fd_ < 0) return;
  if (!saved_.empty()) (void)::pwrite(fd_, saved_.data(), saved_.size(), offset_);
  ::close(fd_);
  fd_ = -1;
}

}  // namespace matserve::client
