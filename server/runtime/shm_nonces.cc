// Registration nonces for shared-memory objects: see shm_nonces.h.
#include "server/runtime/shm_nonces.h"

#include <sys/random.h>

#include <cstring>

namespace matserve::server {
namespace {

std::string fresh_nonce() {
  unsigned char bytes[ShmNonces::kBytes / 2];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(ShmNonces::kBytes);
  for (unsigned char b : bytes) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

// Compares without stopping at the first difference.
bool same_bytes(const std::string& nonce, std::span<const std::byte> bytes) {
  if (bytes.size() < nonce.size()) return false;
  unsigned diff = 0;
  for (std::size_t i = 0; i < nonce.size(); ++i) {
    diff |= static_cast<unsigned>(static_cast<unsigned char>(nonce[i]) ^
                                  std::to_integer<unsigned char>(bytes[i]));
  }
  return diff == 0;
}

}  // namespace

void ShmNonces::sweep(absl::Time now) {
  absl::erase_if(entries_, [&](const auto& e) { return now - e.second.issued >= ttl_; });
}

std::string ShmNonces::issue(const std::string& owner, const std::string& key, absl::Time now) {
  absl::MutexLock lock(&mu_);
  sweep(now);
  auto it = entries_.find(std::pair(owner, key));
  if (it != entries_.end()) return it->second.nonce;
  int mine = 0;
  auto oldest = entries_.end();
  for (auto e = entries_.begin(); e != entries_.end(); ++e) {
    if (e->first.first != owner) continue;
    ++mine;
    if (oldest == entries_.end() || e->second.issued < oldest->second.issued) oldest = e;
  }
  if (mine >= max_per_owner_ && oldest != entries_.end()) entries_.erase(oldest);
  Entry& e = entries_[std::pair(owner, key)];
  e = Entry{fresh_nonce(), now};
  return e.nonce;
}

bool ShmNonces::redeem(const std::string& owner, const std::string& key,
                       std::span<const std::byte> bytes, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(std::pair(owner, key));
  if (it == entries_.end()) return false;
  if (now - it->second.issued >= ttl_) {
    entries_.erase(it);
    return false;
  }
  if (!same_bytes(it->second.nonce, bytes)) return false;
  entries_.erase(it);
  return true;
}

std::size_t ShmNonces::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace matserve::server
