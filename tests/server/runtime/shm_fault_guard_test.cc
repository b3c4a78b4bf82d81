// The SIGBUS guard on its own: a guarded mapping of a truncated object survives any number of
// faults (one per page, in the worst order) with its mappings bounded, reports the fault for good,
// and faults past the range keep the default action.
#include "server/runtime/shm_fault_guard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace matserve::server::shm_fault_guard {
namespace {

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

// A memfd of `bytes`, mapped shared; unmapped and closed at the end.
class MappedMemfd {
 public:
  explicit MappedMemfd(std::size_t bytes) : bytes_(bytes) {
    fd_ = ::memfd_create("matserve-guard-test", MFD_CLOEXEC);
    EXPECT_GE(fd_, 0);
    resize(bytes);
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    EXPECT_NE(m, MAP_FAILED);
    base_ = static_cast<char*>(m);
  }
  ~MappedMemfd() {
    ::munmap(base_, bytes_);
    ::close(fd_);
  }
  void resize(std::size_t bytes) { EXPECT_EQ(::ftruncate(fd_, static_cast<off_t>(bytes)), 0); }
  char* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }

 private:
  int fd_ = -1;
  char* base_ = nullptr;
  std::size_t bytes_;
};

// Lines of /proc/self/maps that overlap [begin, begin + bytes).
int mappings_over(const char* begin, std::size_t bytes) {
  const auto lo = reinterpret_cast<std::uintptr_t>(begin);
  const std::uintptr_t hi = lo + bytes;
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    const std::size_t dash = line.find('-');
    const std::uintptr_t from = std::stoull(line.substr(0, dash), nullptr, 16);
    const std::uintptr_t to = std::stoull(line.substr(dash + 1), nullptr, 16);
    n += (from < hi && to > lo) ? 1 : 0;
  }
  return n;
}

TEST(ShmFaultGuard, SeventyThousandLostPagesLeaveTheProcessAliveWithTwoMappings) {
  ASSERT_TRUE(install().ok());
  // Every other page of a range, upwards: 72000 pages lost, more than the kernel's default 65530
  // mappings per process. A guard that replaced page by page would fault on each of them and
  // split the mapping twice each time (a zero page between two pages of the object), until mmap
  // failed and SIGBUS killed the process.
  constexpr std::size_t kTouched = 72000, kStride = 2;
  MappedMemfd obj(kTouched * kStride * kPage);  // sparse: 560 MiB that cost nothing
  auto range = Range::guard(obj.base(), obj.bytes());
  ASSERT_TRUE(range.ok()) << range.status();
  obj.base()[0] = 1;
  EXPECT_FALSE(range->faulted());
  obj.resize(0);
  for (std::size_t i = 0; i < kTouched; ++i) {
    volatile char* at = obj.base() + i * kStride * kPage + 5;
    ASSERT_EQ(*at, 0) << "page " << i * kStride;
    *at = 3;
  }
  EXPECT_TRUE(range->faulted());
  EXPECT_LE(mappings_over(obj.base(), obj.bytes()), 2);
  EXPECT_EQ(obj.base()[kStride * kPage + 5], 3);  // writes land in private pages
}

TEST(ShmFaultGuard, EveryPageFaultingDownwardsStillLeavesTwoMappings) {
  ASSERT_TRUE(install().ok());
  constexpr std::size_t kPages = 4096;
  MappedMemfd obj(kPages * kPage);
  auto range = Range::guard(obj.base(), obj.bytes());
  ASSERT_TRUE(range.ok()) << range.status();
  obj.resize(0);
  // Each page lies below the part replaced so far: every touch faults.
  for (std::size_t p = kPages; p-- > 0;) {
    volatile char* at = obj.base() + p * kPage;
    ASSERT_EQ(*at, 0) << "page " << p;
  }
  EXPECT_TRUE(range->faulted());
  EXPECT_LE(mappings_over(obj.base(), obj.bytes()), 2);
}

TEST(ShmFaultGuard, AFaultReplacesTheRestOfTheRangeAndALowerOneExtendsIt) {
  ASSERT_TRUE(install().ok());
  constexpr std::size_t kPages = 64;
  MappedMemfd obj(kPages * kPage);
  auto range = Range::guard(obj.base(), obj.bytes());
  ASSERT_TRUE(range.ok()) << range.status();
  for (std::size_t p = 0; p < kPages; ++p) obj.base()[p * kPage] = 'x';
  obj.resize(40 * kPage);
  volatile char* high = obj.base() + 50 * kPage;
  EXPECT_EQ(*high, 0);
  EXPECT_TRUE(range->faulted());
  EXPECT_EQ(obj.base()[39 * kPage], 'x');  // the pages the object still has are its own
  EXPECT_EQ(obj.base()[63 * kPage], 0);    // the rest was replaced in one go
  EXPECT_EQ(mappings_over(obj.base(), obj.bytes()), 2);
  obj.resize(10 * kPage);
  volatile char* low = obj.base() + 20 * kPage;
  EXPECT_EQ(*low, 0);
  EXPECT_EQ(obj.base()[9 * kPage], 'x');
  EXPECT_EQ(mappings_over(obj.base(), obj.bytes()), 2);
  obj.resize(kPages * kPage);  // grown back: the fault is remembered
  EXPECT_TRUE(range->faulted());
}

TEST(ShmFaultGuard, ManyGuardedRangesFaultIndependently) {
  ASSERT_TRUE(install().ok());
  MappedMemfd a(8 * kPage), b(8 * kPage);
  auto ra = Range::guard(a.base(), a.bytes());
  auto rb = Range::guard(b.base(), b.bytes());
  ASSERT_TRUE(ra.ok() && rb.ok());
  a.resize(0);
  volatile char* at = a.base() + 3 * kPage;
  EXPECT_EQ(*at, 0);
  EXPECT_TRUE(ra->faulted());
  EXPECT_FALSE(rb->faulted());
}

TEST(ShmFaultGuardDeathTest, FaultPastTheGuardedRangeKeepsTheDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ASSERT_TRUE(install().ok());
  EXPECT_EXIT(
      {
        MappedMemfd obj(4 * kPage);
        auto range = Range::guard(obj.base(), 2 * kPage);  // only the first two pages
        obj.resize(0);
        volatile char* guarded = obj.base() + kPage;
        (void)*guarded;
        volatile char* unguarded = obj.base() + 3 * kPage;
        (void)*unguarded;
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace matserve::server::shm_fault_guard
