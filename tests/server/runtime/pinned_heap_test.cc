// The pinned heap's bookkeeping on ordinary memory: alignment, first fit, refusal when full,
// coalescing on release, foreign pointers, and many threads at once.
#include "server/runtime/pinned_heap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace matserve::server {
namespace {

constexpr std::size_t kRegion = std::size_t{1} << 20;

class PinnedHeapTest : public ::testing::Test {
 protected:
  // One byte past an aligned address: the heap must align its first block itself.
  std::vector<std::byte> region_ = std::vector<std::byte>(kRegion + 1);
  PinnedHeap heap_{region_.data() + 1, kRegion};
};

TEST_F(PinnedHeapTest, BlocksAreAlignedDisjointAndInside) {
  std::vector<std::pair<std::uintptr_t, std::size_t>> blocks;
  for (std::size_t bytes : {1ul, 255ul, 256ul, 257ul, 4096ul, 100000ul}) {
    void* p = heap_.allocate(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % PinnedHeap::kAlignment, 0u);
    EXPECT_TRUE(heap_.contains(p, bytes));
    blocks.emplace_back(reinterpret_cast<std::uintptr_t>(p), bytes);
  }
  std::sort(blocks.begin(), blocks.end());
  for (std::size_t i = 1; i < blocks.size(); ++i) {
    EXPECT_GE(blocks[i].first, blocks[i - 1].first + blocks[i - 1].second);
  }
}

TEST_F(PinnedHeapTest, RefusesWhatDoesNotFitAndCountsIt) {
  EXPECT_EQ(heap_.allocate(kRegion + 1), nullptr);
  EXPECT_EQ(heap_.allocate(0), nullptr);
  void* most = heap_.allocate(kRegion - 4096);
  ASSERT_NE(most, nullptr);
  EXPECT_EQ(heap_.allocate(8192), nullptr);
  const PinnedHeapStats s = heap_.stats();
  EXPECT_EQ(s.allocations, 1);
  EXPECT_EQ(s.fallbacks, 3);
  EXPECT_EQ(s.in_use_bytes, kRegion - 4096);
  EXPECT_TRUE(heap_.release(most));
  EXPECT_EQ(heap_.stats().in_use_bytes, 0u);
}

TEST_F(PinnedHeapTest, ReleaseCoalescesSoTheWholeRegionFitsAgain) {
  const std::size_t capacity = heap_.stats().capacity_bytes;
  ASSERT_GE(capacity, kRegion - PinnedHeap::kAlignment);
  const std::size_t quarter = capacity / 4 / PinnedHeap::kAlignment * PinnedHeap::kAlignment;
  std::vector<void*> quarters;
  for (int i = 0; i < 4; ++i) quarters.push_back(heap_.allocate(quarter));
  for (void* q : quarters) ASSERT_NE(q, nullptr);
  EXPECT_EQ(heap_.allocate(capacity / 2), nullptr);
  // Freed out of order: the middle two first, then the ends.
  for (int i : {1, 2, 0, 3}) EXPECT_TRUE(heap_.release(quarters[static_cast<std::size_t>(i)]));
  void* whole = heap_.allocate(capacity);
  EXPECT_NE(whole, nullptr);
  EXPECT_TRUE(heap_.release(whole));
}

TEST_F(PinnedHeapTest, ForeignAndRepeatedPointersAreRefused) {
  int outside = 0;
  EXPECT_FALSE(heap_.release(&outside));
  EXPECT_FALSE(heap_.contains(&outside));
  void* p = heap_.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(heap_.release(static_cast<std::byte*>(p) + 256));  // inside, not a block start
  EXPECT_TRUE(heap_.release(p));
  EXPECT_FALSE(heap_.release(p));                                       // already free
  EXPECT_FALSE(heap_.contains(region_.data() + 1 + kRegion - 10, 11));  // runs past the end
}

TEST_F(PinnedHeapTest, ManyThreadsNeverShareABlock) {
  std::vector<std::thread> threads;
  std::atomic<int> overlaps{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int i = 0; i < 2000; ++i) {
        const std::size_t n = 256 + rng() % 20000;
        auto* p = static_cast<std::uint8_t*>(heap_.allocate(n));
        if (p == nullptr) continue;
        std::fill(p, p + n, static_cast<std::uint8_t>(t));
        std::this_thread::yield();
        if (std::any_of(p, p + n, [t](std::uint8_t v) { return v != t; })) ++overlaps;
        EXPECT_TRUE(heap_.release(p));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(heap_.stats().in_use_bytes, 0u);
}

}  // namespace
}  // namespace matserve::server
