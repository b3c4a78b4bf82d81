// ParallelCopier: for_each() runs every index exactly once, on the caller and helpers, and returns
// only after every call returned (the staging ring relies on both).
#include "server/runtime/parallel_copy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace matserve::server {
namespace {

TEST(ParallelCopier, ForEachRunsEveryIndexOnceAndWaitsForAll) {
  ParallelCopier copier(4);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> hits(37);
    copier.for_each(hits.size(), 4, [&](std::size_t i) { hits[i].fetch_add(1); });
    for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  }
}

TEST(ParallelCopier, ForEachWithoutHelpersRunsOnTheCaller) {
  ParallelCopier copier(0);
  std::vector<int> order;
  copier.for_each(5, 8, [&](std::size_t i) { order.push_back(static_cast<int>(i)); });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  copier.for_each(0, 8, [&](std::size_t) { FAIL(); });
}

}  // namespace
}  // namespace matserve::server
