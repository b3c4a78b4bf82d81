// The client's part of the server's possession check for shared-memory registrations: the server
// answers a registration with a nonce (trailing metadata "matserve-shm-nonce"); the client writes
// it into the first bytes of the range it registers, registers again, and then puts back the
// bytes that were there. Only a client that may write the object can do this.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace matserve::client {

inline constexpr char kShmNonceMetadataKey[] = "matserve-shm-nonce";

// Registrations of this process take turns, handshake and all: the nonce is written over bytes of
// the object that every thread here shares, so two handshakes on one range at once would put back
// each other's nonce instead of the data and use up each other's nonces. The process's one lock
// for those writes (Client::register_shared_memory holds it).
absl::Mutex& registration_mutex();

// A nonce written at `offset` of the object `key`; the bytes it covered come back when this goes.
class WrittenNonce {
 public:
  // Opens `key` read-write and writes `nonce` at `offset`, saving what was there first.
  static absl::StatusOr<WrittenNonce> write(const std::string& key, std::int64_t offset,
                                            std::string_view nonce);
  WrittenNonce(WrittenNonce&& o) noexcept { *this = std::move(o); }
  WrittenNonce& operator=(WrittenNonce&& o) noexcept;
  WrittenNonce(const WrittenNonce&) = delete;
  WrittenNonce& operator=(const WrittenNonce&) = delete;
  ~WrittenNonce() { restore(); }

 private:
  WrittenNonce() = default;
  void restore();

  int fd_ = -1;
  std::int64_t offset_ = 0;
  std::string saved_;
};

}  // namespace matserve::client
