// Replica ids in handles: the id's alphabet and length, the default from hostname and port, and
// reading the id back out of a handle (what the clients route on).
#include "server/runtime/replica_handle.h"

#include <gtest/gtest.h>

#include <string>

namespace matserve::server {
namespace {

TEST(ReplicaHandle, IdsAreShortAndOfAPlainAlphabet) {
  EXPECT_TRUE(check_replica_id("matserve-7d9f8-x2kqp:50051").ok());
  EXPECT_TRUE(check_replica_id("a").ok());
  EXPECT_TRUE(check_replica_id(std::string(kMaxReplicaIdBytes, 'r')).ok());
  for (const std::string bad : {std::string(), std::string(kMaxReplicaIdBytes + 1, 'r'),
                                std::string("a/b"), std::string("a b"), std::string("\xff")}) {
    const absl::Status s = check_replica_id(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("replica_id"), absl::string_view::npos) << s;
  }
}

TEST(ReplicaHandle, DefaultIsHostnameAndPortCutToFit) {
  EXPECT_EQ(default_replica_id("pod-0", 50051), "pod-0:50051");
  EXPECT_EQ(default_replica_id("", 7), "replica:7");
  EXPECT_EQ(default_replica_id("a b/c", 1), "a-b-c:1");
  const std::string id = default_replica_id(std::string(200, 'h'), 65535);
  EXPECT_EQ(id.size(), kMaxReplicaIdBytes);
  EXPECT_TRUE(id.ends_with(":65535")) << id;
  EXPECT_TRUE(check_replica_id(id).ok());
}

TEST(ReplicaHandle, TheReplicaReadsBackFromTheHandle) {
  const std::string secret(32, 'f');
  const std::string h = make_handle("pod-1:50051", secret);
  EXPECT_EQ(h, "pod-1:50051/" + secret);
  ASSERT_TRUE(handle_replica(h).has_value());
  EXPECT_EQ(*handle_replica(h), "pod-1:50051");
  EXPECT_EQ(make_handle("", secret), secret);
  EXPECT_FALSE(handle_replica(secret).has_value());
  EXPECT_FALSE(handle_replica("/" + secret).has_value());
  EXPECT_FALSE(handle_replica("a b/" + secret).has_value());
  EXPECT_FALSE(handle_replica("").has_value());
}

}  // namespace
}  // namespace matserve::server
