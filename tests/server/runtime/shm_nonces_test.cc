// Registration nonces for shared-memory objects: issued per (owner, key), matched against the
// bytes a client wrote, single use, expiring, and bounded per owner.
#include "server/runtime/shm_nonces.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace matserve::server {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

// `text` as the bytes a client would write, followed by some bytes of the object.
std::vector<std::byte> written(const std::string& text, std::size_t more = 8) {
  std::vector<std::byte> b(text.size() + more, std::byte{0x5a});
  std::memcpy(b.data(), text.data(), text.size());
  return b;
}

TEST(ShmNonces, AreThirtyTwoHexCharactersAndDifferPerOwnerAndKey) {
  ShmNonces nonces;
  const std::string a = nonces.issue("alice", "/k", kStart);
  EXPECT_EQ(a.size(), ShmNonces::kBytes);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(nonces.issue("bob", "/k", kStart), a);
  EXPECT_NE(nonces.issue("alice", "/other", kStart), a);
  // Asked again while valid: the same one (concurrent registrations of one object agree).
  EXPECT_EQ(nonces.issue("alice", "/k", kStart + absl::Seconds(1)), a);
}

TEST(ShmNonces, MatchOnlyTheOwnersNonceForThatKeyAndOnlyOnce) {
  ShmNonces nonces;
  const std::string a = nonces.issue("alice", "/k", kStart);
  const std::string b = nonces.issue("bob", "/k", kStart);
  EXPECT_FALSE(nonces.redeem("alice", "/k", written(std::string(32, '0')), kStart));
  EXPECT_FALSE(nonces.redeem("alice", "/k", written(a.substr(0, 31), 0), kStart));  // too short
  EXPECT_FALSE(nonces.redeem("bob", "/k", written(a), kStart));    // alice's nonce, bob asks
  EXPECT_FALSE(nonces.redeem("alice", "/x", written(a), kStart));  // another key
  EXPECT_FALSE(nonces.redeem("carol", "/k", written(a), kStart));  // never issued
  // A wrong try leaves the nonce valid; the right one uses it up.
  EXPECT_TRUE(nonces.redeem("alice", "/k", written(a), kStart));
  EXPECT_FALSE(nonces.redeem("alice", "/k", written(a), kStart));
  EXPECT_TRUE(nonces.redeem("bob", "/k", written(b), kStart));
  EXPECT_EQ(nonces.size(), 0u);
  // The next nonce of (alice, /k) is a fresh one.
  EXPECT_NE(nonces.issue("alice", "/k", kStart), a);
}

TEST(ShmNonces, ExpireAfterTheirLifetime) {
  ShmNonces nonces(absl::Seconds(30));
  const std::string a = nonces.issue("alice", "/k", kStart);
  EXPECT_FALSE(nonces.redeem("alice", "/k", written(a), kStart + absl::Seconds(30)));
  EXPECT_EQ(nonces.size(), 0u);  // an expired nonce is forgotten when tried
  const std::string b = nonces.issue("alice", "/k", kStart + absl::Seconds(40));
  EXPECT_NE(b, a);
  EXPECT_TRUE(nonces.redeem("alice", "/k", written(b), kStart + absl::Seconds(69)));
  // Expired nonces of others are swept when a nonce is issued.
  nonces.issue("bob", "/k", kStart);
  nonces.issue("carol", "/k", kStart + absl::Seconds(100));
  EXPECT_EQ(nonces.size(), 1u);
}

TEST(ShmNonces, AnOwnerHoldsABoundedNumber) {
  ShmNonces nonces(absl::Seconds(60), 3);
  const std::string first = nonces.issue("alice", "/k0", kStart);
  for (int i = 1; i < 10; ++i) {
    nonces.issue("alice", "/k" + std::to_string(i), kStart + absl::Milliseconds(i));
  }
  const std::string bobs = nonces.issue("bob", "/k0", kStart);
  EXPECT_EQ(nonces.size(), 4u);  // alice's newest three, and bob's
  EXPECT_FALSE(nonces.redeem("alice", "/k0", written(first), kStart));  // the oldest went
  EXPECT_TRUE(nonces.redeem("bob", "/k0", written(bobs), kStart));
}

}  // namespace
}  // namespace matserve::server
