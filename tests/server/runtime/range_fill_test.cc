// Ranged filling of a resident matrix: the byte-range set (merge, split, overlap) and the fill
// state (bounds, overlaps, completion, a failed write given back, the piece bound).
#include "server/runtime/range_fill.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "server/runtime/byte_ranges.h"

namespace matserve::server {
namespace {

TEST(ByteRanges, AdjacentRangesMergeAndOverlapsAreRefused) {
  ByteRanges r;
  EXPECT_TRUE(r.insert(10, 10));
  EXPECT_TRUE(r.insert(30, 10));
  EXPECT_EQ(r.pieces(), 2u);
  EXPECT_TRUE(r.insert(20, 10));  // fills the gap: one piece [10, 40)
  EXPECT_EQ(r.pieces(), 1u);
  EXPECT_EQ(r.covered(), 30u);
  EXPECT_FALSE(r.insert(39, 2));
  EXPECT_FALSE(r.insert(0, 11));
  EXPECT_FALSE(r.insert(15, 1));
  EXPECT_FALSE(r.insert(0, 100));
  EXPECT_EQ(r.covered(), 30u);
  EXPECT_TRUE(r.insert(40, 1));
  EXPECT_TRUE(r.insert(9, 1));
  EXPECT_EQ(r.pieces(), 1u);
  EXPECT_EQ(r.overlap(0, 9), (std::pair<std::uint64_t, std::uint64_t>{0, 0}));
  EXPECT_EQ(r.overlap(0, 10), (std::pair<std::uint64_t, std::uint64_t>{9, 41}));
  EXPECT_EQ(r.overlap(40, 5), (std::pair<std::uint64_t, std::uint64_t>{9, 41}));
  EXPECT_EQ(r.overlap(41, 5), (std::pair<std::uint64_t, std::uint64_t>{0, 0}));
}

TEST(ByteRanges, EraseSplitsTheRangeThatHoldsIt) {
  ByteRanges r;
  ASSERT_TRUE(r.insert(0, 100));
  r.erase(40, 10);
  EXPECT_EQ(r.pieces(), 2u);
  EXPECT_EQ(r.covered(), 90u);
  EXPECT_TRUE(r.insert(40, 10));  // the bytes given back can be written again
  EXPECT_EQ(r.pieces(), 1u);
  r.erase(0, 10);
  r.erase(90, 10);
  EXPECT_EQ(r.covered(), 80u);
  EXPECT_EQ(r.pieces(), 1u);
  EXPECT_TRUE(r.adjacent(5, 5));
  EXPECT_TRUE(r.adjacent(90, 3));
  EXPECT_FALSE(r.adjacent(0, 5));
}

TEST(RangeFill, CompletesWhenEveryByteIsWrittenInAnyOrder) {
  RangeFill fill(100);
  ASSERT_TRUE(fill.claim(50, 50, "h").ok());
  ASSERT_TRUE(fill.claim(0, 50, "h").ok());
  EXPECT_FALSE(fill.finish(0, 50, true));
  EXPECT_FALSE(fill.complete());
  EXPECT_EQ(fill.written(), 50u);
  EXPECT_TRUE(fill.finish(50, 50, true));
  EXPECT_TRUE(fill.complete());
  const absl::Status again = fill.claim(0, 1, "h");
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_NE(again.message().find("complete"), absl::string_view::npos) << again;
}

TEST(RangeFill, RefusesRangesPastTheEndEmptyOrOverlapping) {
  RangeFill fill(100);
  absl::Status past = fill.claim(90, 11, "h");
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange) << past;
  EXPECT_NE(past.message().find("[90, 101)"), absl::string_view::npos) << past;
  EXPECT_NE(past.message().find("100 bytes"), absl::string_view::npos) << past;
  EXPECT_EQ(fill.claim(101, 1, "h").code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(fill.claim(~std::uint64_t{0}, 2, "h").code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(fill.claim(0, 0, "h").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(fill.claim(10, 20, "h").ok());  // claimed, not yet written: still refused
  absl::Status overlap = fill.claim(25, 10, "h");
  EXPECT_EQ(overlap.code(), absl::StatusCode::kAlreadyExists) << overlap;
  EXPECT_NE(overlap.message().find("[10, 30)"), absl::string_view::npos) << overlap;
  fill.finish(10, 20, true);
  EXPECT_EQ(fill.claim(0, 11, "h").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(fill.written(), 20u);
}

TEST(RangeFill, AFailedWriteGivesItsClaimBack) {
  RangeFill fill(10);
  ASSERT_TRUE(fill.claim(0, 10, "h").ok());
  EXPECT_FALSE(fill.finish(0, 10, false));
  EXPECT_EQ(fill.written(), 0u);
  ASSERT_TRUE(fill.claim(0, 10, "h").ok());
  EXPECT_TRUE(fill.finish(0, 10, true));
}

TEST(RangeFill, BoundsTheSeparatePiecesButNotAdjacentOnes) {
  const std::uint64_t n = RangeFill::kMaxPieces;
  RangeFill fill(4 * n);
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_TRUE(fill.claim(4 * i, 1, "h").ok()) << i;
  const absl::Status more = fill.claim(2, 1, "h");
  EXPECT_EQ(more.code(), absl::StatusCode::kResourceExhausted) << more;
  EXPECT_TRUE(fill.claim(1, 3, "h").ok());  // joins two pieces into one
}

TEST(RangeFill, ConcurrentWritersCompleteItExactlyOnce) {
  constexpr int kThreads = 8;
  constexpr std::uint64_t kRange = 1000;
  RangeFill fill(kThreads * kRange * 4);
  std::atomic<int> completions{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint64_t i = 0; i < 4; ++i) {
        const std::uint64_t offset = (i * kThreads + static_cast<std::uint64_t>(t)) * kRange;
        ASSERT_TRUE(fill.claim(offset, kRange, "h").ok());
        if (fill.finish(offset, kRange, true)) completions.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(completions.load(), 1);
  EXPECT_TRUE(fill.complete());
}

}  // namespace
}  // namespace matserve::server
