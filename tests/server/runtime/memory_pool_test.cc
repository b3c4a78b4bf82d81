// The caching pool: size classes, hits after warm-up, the budget, trimming, stats.
#include "server/runtime/memory_pool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace matserve::server {
namespace {

struct CountingAllocator {
  int allocations = 0;
  int releases = 0;
  int fail_after = 1 << 30;

  RawAllocator raw() {
    return RawAllocator{
        .name = "test memory",
        .allocate = [this](std::size_t bytes) -> void* {
          if (allocations >= fail_after) return nullptr;
          ++allocations;
          return std::malloc(bytes);
        },
        .release =
            [this](void* p) {
              ++releases;
              std::free(p);
            },
    };
  }
};

TEST(MemoryPool, SizeClassesBoundTheSlack) {
  EXPECT_EQ(MemoryPool::size_class(1), 4096u);
  EXPECT_EQ(MemoryPool::size_class(4096), 4096u);
  for (std::size_t b : {4097ul, 5000ul, 1ul << 20, (1ul << 20) + 1, 3ul << 30, 12345678ul}) {
    const std::size_t c = MemoryPool::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LE(c, b + b / 4 + 1) << b;
  }
}

TEST(MemoryPool, SteadyStateHitsTheCacheOnly) {
  CountingAllocator a;
  MemoryPool pool(a.raw(), 1 << 30);
  for (int round = 0; round < 10; ++round) {
    std::vector<MemoryPool::Block> held;
    for (std::size_t bytes : {1000ul, 70000ul, 1ul << 20, 5ul << 20}) {
      auto b = pool.allocate(bytes);
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(b->size(), bytes);
      held.push_back(*std::move(b));
    }
  }
  const PoolStats s = pool.stats();
  EXPECT_EQ(a.allocations, 4);  // warm-up only
  EXPECT_EQ(s.misses, 4);
  EXPECT_EQ(s.hits, 36);
  EXPECT_EQ(s.in_use_bytes, 0);
  EXPECT_GT(s.cached_bytes, 0);
}

TEST(MemoryPool, BudgetRefusesWithTheNumbersAndRecovers) {
  CountingAllocator a;
  MemoryPool pool(a.raw(), 1 << 20);
  auto big = pool.allocate(800 << 10);
  ASSERT_TRUE(big.ok());
  auto more = pool.allocate(400 << 10);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(more.status().message().find("budget of 1048576"), absl::string_view::npos)
      << more.status();
  big->reset();
  EXPECT_TRUE(pool.allocate(400 << 10).ok());  // cached 800K block trimmed to make room
}

TEST(MemoryPool, LongLivedBytesAreCountedApart) {
  CountingAllocator a;
  MemoryPool pool(a.raw(), 1 << 24);
  auto resident = pool.allocate(1 << 20, /*long_lived=*/true);
  auto scratch = pool.allocate(1 << 20);
  ASSERT_TRUE(resident.ok() && scratch.ok());
  EXPECT_EQ(pool.stats().long_lived_bytes, 1 << 20);
  EXPECT_EQ(pool.stats().in_use_bytes, 2 << 20);
  resident->reset();
  EXPECT_EQ(pool.stats().long_lived_bytes, 0);
}

TEST(MemoryPool, RawFailureTrimsThenReports) {
  CountingAllocator a;
  a.fail_after = 1;
  MemoryPool pool(a.raw(), 1 << 30);
  {
    auto first = pool.allocate(1 << 20);
    ASSERT_TRUE(first.ok());
  }
  auto other = pool.allocate(3 << 20);  // the cached 1 MiB block is trimmed, the raw call fails
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.stats().raw_failures, 1);
  EXPECT_EQ(a.releases, 1);
}

TEST(MemoryPool, DestructorReturnsCachedMemory) {
  CountingAllocator a;
  {
    MemoryPool pool(a.raw(), 1 << 30);
    auto b = pool.allocate(100);
  }
  EXPECT_EQ(a.allocations, a.releases);
}

}  // namespace
}  // namespace matserve::server
