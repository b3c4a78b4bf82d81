// Registration nonces for shared-memory objects: a caller proves that it can write an object (it
// holds it, not just knows its name) by writing the nonce the server issued to it for that object
// into the first bytes of the range it registers; the server reads them back through its own
// mapping. One nonce per (owner, key), valid for a short time, used once.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace matserve::server {

// The trailing-metadata key (and absl::Status payload URL) that carries a nonce to the client.
inline constexpr char kShmNonceMetadataKey[] = "matserve-shm-nonce";

class ShmNonces {
 public:
  // A nonce is 32 hex characters (128 bits from the kernel's CSPRNG), written as ASCII.
  static constexpr std::size_t kBytes = 32;

  // Nonces live `ttl`; an owner holds at most `max_per_owner` at once (issuing one more forgets
  // its oldest), so the table stays small whatever a caller asks for.
  explicit ShmNonces(absl::Duration ttl = absl::Seconds(60), int max_per_owner = 64)
      : ttl_(ttl), max_per_owner_(max_per_owner) {}

  // The nonce of (owner, key): the one issued before while it is still valid, else a fresh one.
  std::string issue(const std::string& owner, const std::string& key, absl::Time now);
  // True when `bytes` starts with the valid nonce of (owner, key); that nonce is then forgotten
  // (used once). False, and the nonce kept, otherwise.
  bool redeem(const std::string& owner, const std::string& key, std::span<const std::byte> bytes,
              absl::Time now);
  // Nonces held (expired ones not yet swept included).
  std::size_t size() const;

 private:
  struct Entry {
    std::string nonce;
    absl::Time issued;
  };
  void sweep(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration ttl_;
  const int max_per_owner_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, std::string>, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matserve::server
