// The server binary's operator new with a message heap installed: large blocks (a parsed request's
// operand bytes, a reply's result buffer) land in the heap, small ones and those that do not fit
// come from malloc, and freeing either kind works. The region here is ordinary static memory: the
// placement logic is the same as over the CUDA backend's pinned region.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "matserve/v1/matrix_service.pb.h"
#include "server/runtime/message_memory.h"

namespace matserve::server {
namespace {

constexpr std::size_t kRegion = std::size_t{16} << 20;

// Lives for the whole process: blocks from it may be freed after a test uninstalls its heap.
alignas(4096) std::byte g_region[kRegion];

class PinnedOperatorNewTest : public ::testing::Test {
 protected:
  void SetUp() override { message_memory::install(&heap_); }
  void TearDown() override {
    message_memory::uninstall();
    EXPECT_EQ(heap_.stats().in_use_bytes, 0u) << "a block of the test was not freed";
  }
  PinnedHeap heap_{g_region, kRegion};
};

TEST_F(PinnedOperatorNewTest, LargeBlocksComeFromTheHeapSmallOnesDoNot) {
  auto large = std::make_unique<std::byte[]>(message_memory::kMinBytes);
  auto small = std::make_unique<std::byte[]>(message_memory::kMinBytes - 1);
  EXPECT_TRUE(message_memory::is_pinned(large.get(), message_memory::kMinBytes));
  EXPECT_FALSE(message_memory::is_pinned(small.get(), 1));
  EXPECT_EQ(heap_.stats().allocations, 1);
  large.reset();
  EXPECT_EQ(heap_.stats().in_use_bytes, 0u);
}

TEST_F(PinnedOperatorNewTest, WhatDoesNotFitFallsBackToMalloc) {
  std::vector<std::unique_ptr<std::byte[]>> blocks;
  for (int i = 0; i < 24; ++i)
    blocks.push_back(std::make_unique<std::byte[]>(std::size_t{1} << 20));
  int pinned = 0;
  for (const auto& b : blocks) {
    std::memset(b.get(), 0x5a, std::size_t{1} << 20);  // every block is usable memory
    pinned += message_memory::is_pinned(b.get(), 1) ? 1 : 0;
  }
  EXPECT_GT(pinned, 8);
  EXPECT_LT(pinned, 24);
  EXPECT_EQ(heap_.stats().fallbacks, 24 - pinned);
}

TEST_F(PinnedOperatorNewTest, ProtobufParsesOperandBytesIntoTheHeap) {
  v1::MultiplyRequest sent;
  std::string bytes(std::size_t{3} << 20, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  sent.mutable_a()->set_rows(1024);
  sent.mutable_a()->set_cols(768);
  sent.mutable_a()->set_data(bytes);
  sent.mutable_b()->set_data("small");
  const std::string wire = sent.SerializeAsString();

  v1::MultiplyRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_TRUE(message_memory::is_pinned(parsed.a().data().data(), parsed.a().data().size()));
  EXPECT_FALSE(message_memory::is_pinned(parsed.b().data().data(), 1));
  EXPECT_EQ(parsed.a().data(), bytes);

  // A reply's result buffer, sized the way the handler sizes it.
  v1::MultiplyReply reply;
  reply.mutable_c()->mutable_data()->resize(std::size_t{2} << 20);
  EXPECT_TRUE(message_memory::is_pinned(reply.c().data().data(), reply.c().data().size()));
}

TEST_F(PinnedOperatorNewTest, BlocksFreedAfterUninstallAreIgnoredNotFreedTwice) {
  auto block = std::make_unique<std::byte[]>(message_memory::kMinBytes);
  ASSERT_TRUE(message_memory::is_pinned(block.get(), 1));
  message_memory::uninstall();
  EXPECT_FALSE(message_memory::is_pinned(block.get(), 1));
  auto later = std::make_unique<std::byte[]>(message_memory::kMinBytes);
  EXPECT_FALSE(message_memory::is_pinned(later.get(), 1));
  later.reset();  // malloc'd: freed normally
  block.reset();  // the retired region's block: recognised and left alone
  EXPECT_EQ(heap_.stats().in_use_bytes, message_memory::kMinBytes);  // the heap never saw it back
  message_memory::install(&heap_);
  EXPECT_TRUE(heap_.release(g_region));  // what the heap still counted, handed back by hand
}

}  // namespace
}  // namespace matserve::server
