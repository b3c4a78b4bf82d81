// Resident handles: unguessable, owner-scoped, released on request or after the idle TTL.
#include "server/runtime/resident_store.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <set>

namespace matserve::server {
namespace {

std::shared_ptr<ResidentMatrix> matrix(const std::string& owner) {
  auto m = std::make_shared<ResidentMatrix>();
  m->owner = owner;
  return m;
}

TEST(ResidentStore, HandlesAreUniqueAndLookLikeRandom128Bits) {
  ResidentStore store(absl::Minutes(1));
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string h = store.add(matrix(""));
    EXPECT_EQ(h.size(), 32u);
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_TRUE(seen.insert(h).second);
  }
  EXPECT_EQ(store.stats().count, 1000);
}

// With a replica id, every handle carries it ahead of the same 128 random bits.
TEST(ResidentStore, HandlesCarryTheReplicaId) {
  ResidentStore store(absl::Minutes(1));
  store.set_replica_id("pod-2:50051");
  EXPECT_EQ(store.replica_id(), "pod-2:50051");
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string h = store.add(matrix(""));
    ASSERT_EQ(h.size(), 12u + 32u) << h;
    EXPECT_EQ(h.substr(0, 12), "pod-2:50051/");
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef", 12), std::string::npos) << h;
    EXPECT_TRUE(seen.insert(h.substr(12)).second);
    EXPECT_TRUE(store.get("a_handle", h, "").ok());
  }
}

// Another replica's handle is NOT_FOUND naming both replicas; an unknown one of this replica
// keeps the plain message.
TEST(ResidentStore, AnotherReplicasHandleIsNotFoundNamingIt) {
  ResidentStore store(absl::Minutes(1));
  store.set_replica_id("r1");
  const absl::Status s = store.get("b_handle", "r2/" + std::string(32, 'a'), "").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("b_handle"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("on this replica ('r1'): the handle names replica 'r2'"),
            absl::string_view::npos)
      << s;
  const absl::Status own = store.release("r1/" + std::string(32, 'a'), "").status();
  EXPECT_EQ(own.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(own.message().find("never created"), absl::string_view::npos) << own;
}

TEST(ResidentStore, OtherOwnersSeeNothing) {
  ResidentStore store(absl::Minutes(1));
  const std::string h = store.add(matrix("alice"));
  EXPECT_TRUE(store.get("a_handle", h, "alice").ok());
  auto foreign = store.get("a_handle", h, "bob");
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(foreign.status().message().find("a_handle"), absl::string_view::npos);
  EXPECT_FALSE(store.release(h, "bob").ok());
  EXPECT_TRUE(store.list("bob").empty());
  EXPECT_EQ(store.list("alice").size(), 1u);
}

// A garbage handle is quoted short and escaped in the message, never echoed whole.
TEST(ResidentStore, GarbageHandlesAreQuotedShort) {
  ResidentStore store(absl::Minutes(1));
  const std::string garbage = std::string("\x01\xff'\n", 4) + std::string(100000, 'x');
  const absl::Status s = store.release(garbage, "").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_LT(s.message().size(), 200u) << s;
  EXPECT_NE(s.message().find("'\\x01\\xff\\'\\n"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("(100004 bytes)"), absl::string_view::npos) << s;
  EXPECT_EQ(store.get("a_handle", "", "").status().code(), absl::StatusCode::kNotFound);
}

RawAllocator heap_allocator() {
  return RawAllocator{.name = "t",
                      .allocate = [](std::size_t b) { return std::malloc(b); },
                      .release = [](void* p) { std::free(p); }};
}

// Reservations count against the quota together with published matrices, per owner, until
// they end: two requests in progress cannot both take the last free bytes, and a published
// matrix holds its bytes until it is released.
TEST(ResidentStore, QuotaReservationsAddUpWithPublishedMatrices) {
  MemoryPool pool(heap_allocator(), 1 << 30);
  ResidentStore store(absl::Minutes(1));
  const std::int64_t limit = 3 * 4096;
  auto published = matrix("alice");
  published->block = *pool.allocate(4096, true);
  const std::string handle = store.add(published);
  EXPECT_EQ(store.bytes_of("alice"), 4096);
  EXPECT_EQ(store.bytes_of("bob"), 0);
  absl::StatusOr<QuotaReservation> first = store.reserve("alice", 4096, limit);
  absl::StatusOr<QuotaReservation> second = store.reserve("alice", 100, limit);  // 4096 counted
  ASSERT_TRUE(first.ok() && second.ok());
  const absl::Status refused = store.reserve("alice", 1, limit).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("4096 held now, 8192 reserved by requests in progress"),
            absl::string_view::npos)
      << refused;
  EXPECT_TRUE(store.reserve("bob", 4096, limit).ok());  // another owner's quota is its own
  first->reset();                                       // a request ended: its bytes come back
  absl::StatusOr<QuotaReservation> third = store.reserve("alice", 4096, limit);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(store.reserve("alice", 1, limit).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store.release(handle, "alice").ok());  // the published bytes come back too
  EXPECT_EQ(store.bytes_of("alice"), 0);
  EXPECT_TRUE(store.reserve("alice", 4096, limit).ok());
  EXPECT_TRUE(store.reserve("alice", 1 << 30, 0).ok());  // no limit: nothing reserved
}

// A matrix's kept transposed copy (fp8) counts against its owner's quota and in the resident
// bytes; room_of says what is left; an in-place transpose's drop gives it back.
TEST(ResidentStore, AKeptTransposedCopyCountsAgainstTheQuota) {
  MemoryPool pool(heap_allocator(), 1 << 30);
  ResidentStore store(absl::Minutes(1));
  const std::int64_t limit = 4 * 4096;
  auto m = matrix("alice");
  m->block = *pool.allocate(3000, true);
  store.add(m);
  EXPECT_EQ(store.room_of("alice", limit), 3 * 4096);
  absl::StatusOr<QuotaReservation> pending = store.reserve("alice", 4096, limit);
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(store.room_of("alice", limit), 2 * 4096);
  m->keep_transposed(*pool.allocate(3000, true));
  EXPECT_NE(m->transposed_data(), nullptr);
  EXPECT_EQ(store.bytes_of("alice"), 2 * 4096);
  EXPECT_EQ(store.stats().bytes, 3000 + 4096);
  EXPECT_EQ(store.room_of("alice", limit), 4096);
  m->keep_transposed(*pool.allocate(3000, true));  // a second copy is not kept
  EXPECT_EQ(store.bytes_of("alice"), 2 * 4096);
  EXPECT_EQ(store.room_of("bob", limit), limit);
  EXPECT_EQ(store.room_of("alice", 0), std::numeric_limits<std::int64_t>::max());
  m->drop_transposed();
  EXPECT_EQ(m->transposed_data(), nullptr);
  EXPECT_EQ(store.bytes_of("alice"), 4096);
  EXPECT_EQ(store.room_of("alice", 2 * 4096), 0);  // held 4096 + reserved 4096
  EXPECT_EQ(pool.stats().long_lived_bytes, 4096);  // both copies went back to the pool
}

TEST(ResidentStore, ReleaseForgetsTheHandle) {
  ResidentStore store(absl::Minutes(1));
  const std::string h = store.add(matrix(""));
  EXPECT_TRUE(store.release(h, "").ok());
  EXPECT_EQ(store.get("handle", h, "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.release(h, "").status().code(), absl::StatusCode::kNotFound);
}

// Idle times are set by hand (last_used_ms, which every use stamps): no test waits on the clock.
TEST(ResidentStore, IdleMatricesExpireAndUseKeepsThemAlive) {
  ResidentStore store(absl::Minutes(1));
  auto idle = matrix("");
  auto used = matrix("");
  const std::string idle_handle = store.add(idle);
  const std::string used_handle = store.add(used);
  EXPECT_EQ(store.sweep(), 0);  // both just made
  idle->last_used_ms.store(monotonic_ms() - 61'000);
  used->last_used_ms.store(monotonic_ms() - 61'000);
  EXPECT_EQ(store.expires_in_ms(*idle), 0);
  ASSERT_TRUE(store.get("h", used_handle, "").ok());  // a use restarts its idle time
  EXPECT_GT(store.expires_in_ms(*used), 0);
  EXPECT_EQ(store.sweep(), 1);
  EXPECT_FALSE(store.get("h", idle_handle, "").ok());
  EXPECT_TRUE(store.get("h", used_handle, "").ok());
  EXPECT_EQ(store.stats().expired_total, 1);
}

// A matrix in use (an operation holds its lock) does not expire however long the use lasts,
// and its idle time starts when the use ends: a long Multiply never loses its operand's handle.
TEST(ResidentStore, MatricesInUseDoNotExpire) {
  ResidentStore store(absl::Minutes(1));
  auto m = matrix("");
  const std::string h = store.add(m);
  const auto long_ago = [] { return monotonic_ms() - 120'000; };
  {
    ResidentLock use(m, /*exclusive=*/false);
    m->last_used_ms.store(long_ago());  // in use for two minutes
    EXPECT_EQ(store.sweep(), 0);
    EXPECT_EQ(m->users.load(), 1);
  }
  EXPECT_EQ(store.sweep(), 0);  // idle for an instant only: the end of the use restarted it
  EXPECT_GT(m->last_used_ms.load(), long_ago());
  EXPECT_TRUE(store.get("h", h, "").ok());
  {
    ResidentLock in_place(m, /*exclusive=*/true);
    m->last_used_ms.store(long_ago());
    EXPECT_EQ(store.sweep(), 0);
  }
  m->last_used_ms.store(long_ago());  // idle past the TTL: gone
  EXPECT_EQ(store.sweep(), 1);
  EXPECT_FALSE(store.get("h", h, "").ok());
}

TEST(ResidentStore, MemoryReturnsWhenTheLastUserLetsGo) {
  RawAllocator raw{.name = "t",
                   .allocate = [](std::size_t b) { return std::malloc(b); },
                   .release = [](void* p) { std::free(p); }};
  MemoryPool pool(raw, 1 << 30);
  ResidentStore store(absl::Minutes(1));
  auto m = matrix("");
  m->block = *pool.allocate(1 << 20, true);
  const std::string h = store.add(m);
  m.reset();
  auto in_use = store.get("h", h, "");  // an operation still holds it
  ASSERT_TRUE(store.release(h, "").ok());
  EXPECT_GT(pool.stats().long_lived_bytes, 0);
  in_use->reset();
  EXPECT_EQ(pool.stats().long_lived_bytes, 0);
}

// A matrix being filled range by range (CreateResident) is listed and found for its writes, but
// every use is refused, naming the bytes still missing, until its last byte arrives.
TEST(ResidentStore, AMatrixBeingFilledIsNotUsableUntilComplete) {
  ResidentStore store(absl::Minutes(1));
  auto m = matrix("alice");
  m->fill = std::make_unique<RangeFill>(100);
  const std::string h = store.add(m);
  const absl::Status use = store.get("a_handle", h, "alice").status();
  EXPECT_EQ(use.code(), absl::StatusCode::kFailedPrecondition) << use;
  EXPECT_NE(use.message().find("a_handle"), absl::string_view::npos) << use;
  EXPECT_NE(use.message().find("100 of its 100 bytes"), absl::string_view::npos) << use;
  EXPECT_TRUE(store.find("handle", h, "alice").ok());
  EXPECT_EQ(store.find("handle", h, "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.list("alice").size(), 1u);
  ASSERT_TRUE(m->fill->claim(0, 60, h).ok());
  m->fill->finish(0, 60, true);
  const absl::Status partial = store.get("a_handle", h, "alice").status();
  EXPECT_NE(partial.message().find("40 of its 100 bytes"), absl::string_view::npos) << partial;
  ASSERT_TRUE(m->fill->claim(60, 40, h).ok());
  EXPECT_TRUE(m->fill->finish(60, 40, true));
  EXPECT_TRUE(store.get("a_handle", h, "alice").ok());
}

// A matrix left half-filled (its client went away) is released after the fill timeout, however
// long the TTL of complete matrices is.
TEST(ResidentStore, AnAbandonedFillIsReleasedAfterTheFillTimeout) {
  ResidentStore store(absl::Minutes(10));
  store.set_fill_timeout(absl::Milliseconds(50));
  auto filling = matrix("");
  filling->fill = std::make_unique<RangeFill>(100);
  const std::string abandoned = store.add(filling);
  const std::string ready = store.add(matrix(""));
  EXPECT_LE(store.expires_in_ms(*filling), 50);
  absl::SleepFor(absl::Milliseconds(120));
  EXPECT_EQ(store.sweep(), 1);
  EXPECT_EQ(store.find("handle", abandoned, "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.get("handle", ready, "").ok());
}

}  // namespace
}  // namespace matserve::server
