// Shared-memory regions on the host: registration rules, per-owner visibility and limits (count
// and bytes), ranges at unaligned offsets, the object identity behind registrations, client
// strings cut in messages, and the SIGBUS guard (a truncated object faults into a zero page and
// the region reports it; a fault outside every guarded range still kills the process).
#include "server/runtime/shared_memory_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/runtime/pinned_ranges.h"

namespace matserve::server {
namespace {

using ::testing::HasSubstr;

// A POSIX shared-memory object of `bytes`, unlinked at the end of the test.
class ShmObject {
 public:
  explicit ShmObject(std::size_t bytes) {
    static std::atomic<int> serial{0};
    key_ = "/matserve-region-test-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
    fd_ = ::shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd_, 0) << std::strerror(errno);
    resize(bytes);
  }
  ~ShmObject() {
    ::close(fd_);
    ::shm_unlink(key_.c_str());
  }
  void resize(std::size_t bytes) { EXPECT_EQ(::ftruncate(fd_, static_cast<off_t>(bytes)), 0); }
  void unlink() { ::shm_unlink(key_.c_str()); }  // mappings stay valid
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  int fd_ = -1;
};

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

SharedMemoryRegionInfo info(const std::string& name, const std::string& key, std::int64_t offset,
                            std::int64_t bytes) {
  return SharedMemoryRegionInfo{.name = name, .key = key, .offset = offset, .byte_size = bytes};
}

TEST(SharedMemoryRegions, RangeAtAnUnalignedOffsetSeesTheObjectsBytes) {
  ShmObject obj(3 * kPage);
  SharedMemoryRegistry registry(nullptr);
  auto writer = registry.add("", info("all", obj.key(), 0, 3 * kPage));
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto sub = registry.add("", info("sub", obj.key(), kPage + 100, 500));
  ASSERT_TRUE(sub.ok()) << sub.status();
  std::memcpy((*writer)->bytes().data() + kPage + 100, "hello", 5);
  EXPECT_EQ(std::memcmp((*sub)->bytes().data(), "hello", 5), 0);
  EXPECT_EQ((*sub)->bytes().size(), 500u);
  EXPECT_FALSE((*sub)->info().pinned);
}

TEST(SharedMemoryRegions, OwnersSeeOnlyTheirOwnAndTheLimitIsPerOwner) {
  ShmObject obj(kPage);
  SharedMemoryRegistry registry(nullptr);
  registry.set_max_regions_per_owner(2);
  ASSERT_TRUE(registry.add("alice", info("x", obj.key(), 0, 64)).ok());
  ASSERT_TRUE(registry.add("alice", info("y", obj.key(), 0, 64)).ok());
  EXPECT_EQ(registry.add("alice", info("z", obj.key(), 0, 64)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(registry.add("alice", info("x", obj.key(), 0, 64)).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.add("bob", info("x", obj.key(), 0, 64)).ok());
  EXPECT_EQ(registry.find("bob", "y", "a.shm.region").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.list("alice").size(), 2u);
  EXPECT_EQ(registry.list("bob").size(), 1u);
  EXPECT_EQ(registry.remove("bob", "y").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*registry.remove("alice", ""), 2);
  EXPECT_EQ(registry.list("alice").size(), 0u);
  EXPECT_EQ(registry.list("bob").size(), 1u);
}

TEST(SharedMemoryRegions, RegistrationErrorsNameTheField) {
  ShmObject obj(kPage);
  SharedMemoryRegistry registry(nullptr);
  const auto code = [&](SharedMemoryRegionInfo i) { return registry.add("", i).status(); };
  EXPECT_THAT(code(info("x", obj.key(), 0, kPage + 1)).message(),
              HasSubstr("byte_size: offset 0 + byte_size"));
  EXPECT_EQ(code(info("x", "/matserve-no-such-object", 0, 1)).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(code(info("x", "relative", 0, 1)).message(), HasSubstr("key: must be"));
  EXPECT_THAT(code(info("bad/name", obj.key(), 0, 1)).message(), HasSubstr("name: 'bad/name'"));
  EXPECT_THAT(code(info("x", obj.key(), -1, 1)).message(), HasSubstr("offset: must be >= 0"));
}

TEST(SharedMemoryRegions, PinnerSeesTheRangeAndIsReleasedWithTheRegion) {
  ShmObject obj(2 * kPage);
  PinnedRanges ranges;
  SharedMemoryRegistry registry([&](std::span<std::byte> bytes) -> std::shared_ptr<void> {
    ranges.add(bytes.data(), bytes.size());
    return std::shared_ptr<void>(bytes.data(), [&](void* p) { ranges.remove(p); });
  });
  auto r = registry.add("", info("p", obj.key(), 10, kPage));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->info().pinned);
  const std::byte* base = (*r)->bytes().data();
  const std::byte* page = base - 10;  // the range starts 10 bytes into the first mapped page
  EXPECT_TRUE(ranges.contains(base, kPage));      // the whole registered range is pinned...
  EXPECT_TRUE(ranges.contains(page, 2 * kPage));  // ...as whole pages
  EXPECT_FALSE(ranges.contains(page, 2 * kPage + 1));
  EXPECT_FALSE(ranges.contains(page - 1, 2));
  r->reset();
  ASSERT_TRUE(registry.remove("", "p").ok());
  EXPECT_FALSE(ranges.contains(base, 1));
}

TEST(SharedMemoryRegions, TruncatedObjectFaultsIntoZerosAndIsReported) {
  ShmObject obj(4 * kPage);
  SharedMemoryRegistry registry(nullptr);
  auto r = registry.add("", info("t", obj.key(), 0, 4 * kPage));
  ASSERT_TRUE(r.ok()) << r.status();
  std::byte* bytes = (*r)->bytes().data();
  std::memset(bytes, 0x5a, 4 * kPage);
  EXPECT_TRUE((*r)->check_intact().ok());
  obj.resize(kPage);  // the client shrinks the object under the mapping
  // Without the guard this read would kill the process with SIGBUS.
  volatile std::byte* lost = bytes + 2 * kPage + 7;
  EXPECT_EQ(static_cast<int>(*lost), 0);
  *lost = std::byte{1};  // writes land in the private page, not in the object
  EXPECT_EQ(static_cast<int>(bytes[0]), 0x5a);  // the page the object still has is untouched
  const absl::Status s = (*r)->check_intact();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("region 't'"));
  obj.resize(4 * kPage);  // grown back: the size is fine, but the fault is remembered
  EXPECT_EQ((*r)->check_intact().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry.find("", "t", "a.shm.region").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(SharedMemoryRegions, DeviceRegionsAreCheckedAgainstTheAllocationAndShareTheNames) {
  ShmObject obj(kPage);
  SharedMemoryRegistry registry(nullptr);
  ASSERT_TRUE(registry.add("", info("host", obj.key(), 0, 64)).ok());
  std::byte fake[1000];  // stands for the client's device allocation (never dereferenced here)
  int opened = 0;
  const auto opener = [&]() -> absl::StatusOr<OpenedDeviceMemory> {
    ++opened;
    return OpenedDeviceMemory{.device = 1, .label = "cuda:1", .base = fake, .bytes = 1000};
  };
  auto r = registry.add_device("", info("gpu", "", 10, 990), opener);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->is_device());
  EXPECT_EQ((*r)->device(), 1);
  EXPECT_EQ((*r)->bytes().data(), fake + 10);
  EXPECT_EQ((*r)->info().device, "cuda:1");
  EXPECT_TRUE((*r)->check_intact().ok());
  EXPECT_THAT(registry.add_device("", info("big", "", 10, 991), opener).status().message(),
              HasSubstr("byte_size: offset 10 + byte_size 991 exceeds the 1000 bytes"));
  // One namespace: a device region cannot take a host region's name; refused before opening.
  const int before = opened;
  EXPECT_EQ(registry.add_device("", info("host", "", 0, 8), opener).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(opened, before);
  const auto refused = []() -> absl::StatusOr<OpenedDeviceMemory> {
    return absl::InvalidArgumentError("ipc_handle: refused");
  };
  EXPECT_EQ(registry.add_device("", info("x", "", 0, 8), refused).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.list("").size(), 2u);
}

TEST(SharedMemoryRegions, RegisteredBytesAreBoundedPerOwnerAndInAll) {
  ShmObject obj(4 * kPage);
  SharedMemoryRegistry registry(nullptr);
  registry.set_max_bytes(3 * kPage, 5 * kPage);
  ASSERT_TRUE(registry.add("a", info("a1", obj.key(), 0, 2 * kPage)).ok());
  absl::Status s = registry.add("a", info("a2", obj.key(), 0, 2 * kPage)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("limit of " + std::to_string(3 * kPage) +
                                     " bytes (--max_shared_memory_bytes_per_owner"));
  ASSERT_TRUE(registry.add("a", info("a2", obj.key(), 0, kPage)).ok());  // exactly the limit
  ASSERT_TRUE(registry.add("b", info("b1", obj.key(), 0, 2 * kPage)).ok());
  s = registry.add("b", info("b2", obj.key(), 0, 1)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("limit of " + std::to_string(5 * kPage) +
                                     " bytes (--max_shared_memory_bytes;"));
  // Device regions map no host memory: not counted.
  std::byte fake[64];
  const auto opener = [&]() -> absl::StatusOr<OpenedDeviceMemory> {
    return OpenedDeviceMemory{.device = 0, .label = "cuda:0", .base = fake, .bytes = 64};
  };
  EXPECT_TRUE(registry.add_device("b", info("gpu", "", 0, 64), opener).ok());
  // Unregistering gives the bytes back; so does a refused open its reservation.
  ASSERT_TRUE(registry.remove("a", "a1").ok());  // the server's total has room again
  EXPECT_EQ(registry.add("b", info("none", "/matserve-no-such-object", 0, kPage)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.add("b", info("b2", obj.key(), 0, kPage)).ok());  // b at its limit
  ASSERT_TRUE(registry.remove("b", "").ok());
  ASSERT_TRUE(registry.remove("a", "").ok());
  EXPECT_TRUE(registry.add("c", info("c1", obj.key(), 0, 3 * kPage)).ok());
}

TEST(SharedMemoryRegions, AHugeSparseObjectIsRefusedBeforeItIsMapped) {
  ShmObject obj(kPage);
  obj.resize(std::size_t{1} << 47);        // sparse: costs nothing until written
  SharedMemoryRegistry registry(nullptr);  // the default limits
  const absl::Status s =
      registry.add("", info("huge", obj.key(), 0, std::int64_t{1} << 47)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--max_shared_memory_bytes_per_owner"));
  EXPECT_TRUE(registry.list("").empty());
}

TEST(SharedMemoryRegions, RegistrationsOfOneObjectShareItsIdentity) {
  ShmObject obj(2 * kPage), other(kPage);
  SharedMemoryRegistry registry(nullptr);
  auto x = registry.add("", info("x", obj.key(), 0, 2 * kPage));
  auto y = registry.add("", info("y", obj.key(), kPage, kPage));
  auto z = registry.add("", info("z", other.key(), 0, kPage));
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  EXPECT_TRUE((*x)->object() == (*y)->object());
  EXPECT_FALSE((*x)->object() == (*z)->object());
  EXPECT_EQ((*y)->object_offset(), static_cast<std::int64_t>(kPage));
  EXPECT_NE((*x)->bytes().data() + kPage, (*y)->bytes().data());  // two mappings, one object
}

TEST(SharedMemoryRegions, LongClientStringsAreCutInMessages) {
  SharedMemoryRegistry registry(nullptr);
  const std::string long_name(20000, 'n'), long_key = "/" + std::string(20000, 'k');
  const std::string bad_name = std::string(60, 'x') + "!" + std::string(60, 'x');
  for (const absl::Status& s :
       {registry.add("", info(bad_name, "/k", 0, 1)).status(),
        registry.add("", info("n", long_key, 0, 1)).status(),
        registry.add("", info("n", "/" + std::string(200, 'k'), 0, 1)).status(),
        registry.find("", long_name, "a.shm.region").status(),
        registry.remove("", long_name).status()}) {
    EXPECT_FALSE(s.ok());
    EXPECT_LT(s.message().size(), 400u) << s.message().substr(0, 400);
  }
}

TEST(SharedMemoryRegionsDeathTest, FaultOutsideEveryGuardedRangeKeepsTheDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ShmObject guarded(kPage);
  SharedMemoryRegistry registry(nullptr);
  ASSERT_TRUE(registry.add("", info("g", guarded.key(), 0, kPage)).ok());  // handler installed
  // The death test's child runs this body again and dies: nothing it makes may need cleaning.
  guarded.unlink();
  EXPECT_EXIT(
      {
        const int fd = ::memfd_create("matserve-unguarded", 0);
        (void)::ftruncate(fd, static_cast<off_t>(2 * kPage));
        auto* p = static_cast<volatile char*>(
            ::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        (void)::ftruncate(fd, 0);
        (void)p[kPage];
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace matserve::server
