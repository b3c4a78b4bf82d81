// Shared-memory regions on the host: registration rules, per-owner visibility and limits (count
// and bytes), ranges at unaligned offsets, the object identity behind registrations, client
// strings cut in messages, possession (the owner's nonce in the range) and the objects' users, and
// the SIGBUS guard (a truncated object faults into a zero page and the region reports it; a fault
// outside every guarded range still kills the process).
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

// Registers as a client that holds the object does: when the registry asks for its nonce, writes
// it into the first bytes of the range, registers again, and puts the bytes back. Other answers
// are returned as they are.
absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> holding(SharedMemoryRegistry& registry,
                                                            const std::string& owner,
                                                            const SharedMemoryRegionInfo& i) {
  auto first = registry.add(owner, i);
  if (first.ok()) return first;
  const auto nonce = first.status().GetPayload(kShmNonceMetadataKey);
  if (!nonce) return first;
  const int fd = ::shm_open(i.key.c_str(), O_RDWR, 0);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  const std::string text(*nonce);
  std::string saved(text.size(), '\0');
  EXPECT_EQ(::pread(fd, saved.data(), saved.size(), i.offset), static_cast<ssize_t>(saved.size()));
  EXPECT_EQ(::pwrite(fd, text.data(), text.size(), i.offset), static_cast<ssize_t>(text.size()));
  auto second = registry.add(owner, i);
  EXPECT_EQ(::pwrite(fd, saved.data(), saved.size(), i.offset), static_cast<ssize_t>(saved.size()));
  ::close(fd);
  return second;
}

TEST(SharedMemoryRegions, RangeAtAnUnalignedOffsetSeesTheObjectsBytes) {
  ShmObject obj(3 * kPage);
  SharedMemoryRegistry registry(nullptr);
  auto writer = holding(registry, "", info("all", obj.key(), 0, 3 * kPage));
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto sub = holding(registry, "", info("sub", obj.key(), kPage + 100, 500));
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
  ASSERT_TRUE(holding(registry, "alice", info("x", obj.key(), 0, 64)).ok());
  ASSERT_TRUE(holding(registry, "alice", info("y", obj.key(), 0, 64)).ok());
  EXPECT_EQ(holding(registry, "alice", info("z", obj.key(), 0, 64)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(holding(registry, "alice", info("x", obj.key(), 0, 64)).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(holding(registry, "bob", info("x", obj.key(), 0, 64)).ok());
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
  const auto code = [&](SharedMemoryRegionInfo i) { return holding(registry, "", i).status(); };
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
  auto r = holding(registry, "", info("p", obj.key(), 10, kPage));
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
  auto r = holding(registry, "", info("t", obj.key(), 0, 4 * kPage));
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
  ASSERT_TRUE(holding(registry, "", info("host", obj.key(), 0, 64)).ok());
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
  ASSERT_TRUE(holding(registry, "a", info("a1", obj.key(), 0, 2 * kPage)).ok());
  absl::Status s = holding(registry, "a", info("a2", obj.key(), 0, 2 * kPage)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("limit of " + std::to_string(3 * kPage) +
                                     " bytes (--max_shared_memory_bytes_per_owner"));
  ASSERT_TRUE(holding(registry, "a", info("a2", obj.key(), 0, kPage)).ok());  // exactly the limit
  ASSERT_TRUE(holding(registry, "b", info("b1", obj.key(), 0, 2 * kPage)).ok());
  s = holding(registry, "b", info("b2", obj.key(), 0, 1)).status();
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
  EXPECT_EQ(
      holding(registry, "b", info("none", "/matserve-no-such-object", 0, kPage)).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_TRUE(holding(registry, "b", info("b2", obj.key(), 0, kPage)).ok());  // b at its limit
  ASSERT_TRUE(registry.remove("b", "").ok());
  ASSERT_TRUE(registry.remove("a", "").ok());
  EXPECT_TRUE(holding(registry, "c", info("c1", obj.key(), 0, 3 * kPage)).ok());
}

TEST(SharedMemoryRegions, AHugeSparseObjectIsRefusedBeforeItIsMapped) {
  ShmObject obj(kPage);
  obj.resize(std::size_t{1} << 47);        // sparse: costs nothing until written
  SharedMemoryRegistry registry(nullptr);  // the default limits
  const absl::Status s =
      holding(registry, "", info("huge", obj.key(), 0, std::int64_t{1} << 47)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--max_shared_memory_bytes_per_owner"));
  EXPECT_TRUE(registry.list("").empty());
}

TEST(SharedMemoryRegions, RegistrationsOfOneObjectShareItsIdentity) {
  ShmObject obj(2 * kPage), other(kPage);
  SharedMemoryRegistry registry(nullptr);
  auto x = holding(registry, "", info("x", obj.key(), 0, 2 * kPage));
  auto y = holding(registry, "", info("y", obj.key(), kPage, kPage));
  auto z = holding(registry, "", info("z", other.key(), 0, kPage));
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
       {holding(registry, "", info(bad_name, "/k", 0, 1)).status(),
        holding(registry, "", info("n", long_key, 0, 1)).status(),
        holding(registry, "", info("n", "/" + std::string(200, 'k'), 0, 1)).status(),
        registry.find("", long_name, "a.shm.region").status(),
        registry.remove("", long_name).status()}) {
    EXPECT_FALSE(s.ok());
    EXPECT_LT(s.message().size(), 400u) << s.message().substr(0, 400);
  }
}

// Writes `text` at `offset` of the object `key` (as a client that may write it does).
void write_object(const std::string& key, std::int64_t offset, const std::string& text) {
  const int fd = ::shm_open(key.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::pwrite(fd, text.data(), text.size(), offset), static_cast<ssize_t>(text.size()));
  ::close(fd);
}

std::string nonce_of(const absl::Status& s) {
  const auto nonce = s.GetPayload(kShmNonceMetadataKey);
  return nonce ? std::string(*nonce) : "";
}

TEST(SharedMemoryRegions, PossessionIsTheOwnersNonceInTheFirstBytesOfTheRange) {
  ShmObject obj(2 * kPage);
  SharedMemoryRegistry registry(nullptr);
  // The key alone is not enough: refused with a nonce, nothing registered or mapped.
  const absl::Status asked = registry.add("alice", info("x", obj.key(), 100, kPage)).status();
  EXPECT_EQ(asked.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(asked.message(), HasSubstr("registration nonce"));
  EXPECT_THAT(asked.message(), HasSubstr(kShmNonceMetadataKey));
  const std::string nonce = nonce_of(asked);
  ASSERT_EQ(nonce.size(), ShmNonces::kBytes);
  EXPECT_TRUE(registry.list("alice").empty());
  // Asked again without writing: the same nonce, refused again.
  const absl::Status again = registry.add("alice", info("x", obj.key(), 100, kPage)).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nonce_of(again), nonce);
  // Written elsewhere than the range's first bytes: refused.
  write_object(obj.key(), 0, nonce);
  EXPECT_EQ(registry.add("alice", info("x", obj.key(), 100, kPage)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Alice's nonce does not admit bob.
  write_object(obj.key(), 100, nonce);
  const absl::Status bob = registry.add("bob", info("x", obj.key(), 100, kPage)).status();
  EXPECT_EQ(bob.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(nonce_of(bob), nonce);
  // Alice, with her nonce in place: registered.
  auto r = registry.add("alice", info("x", obj.key(), 100, kPage));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::memcmp((*r)->bytes().data(), nonce.data(), nonce.size()), 0);
  // Used once: the same bytes do not register a second region.
  const absl::Status used = registry.add("alice", info("y", obj.key(), 100, kPage)).status();
  EXPECT_EQ(used.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(nonce_of(used), nonce);
  EXPECT_EQ(registry.list("alice").size(), 1u);
}

TEST(SharedMemoryRegions, ARangeSmallerThanTheNonceIsRefused) {
  ShmObject obj(kPage);
  SharedMemoryRegistry registry(nullptr);
  const absl::Status s = registry.add("", info("x", obj.key(), 0, 31)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("byte_size: a shared-memory region holds at least 32 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("got 31"));
  EXPECT_TRUE(holding(registry, "", info("x", obj.key(), 0, 32)).ok());
}

TEST(SharedMemoryRegions, ObjectsOfOtherUsersAreRefusedUnlessAllowed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give an object to another user";
  ShmObject obj(kPage);
  {
    const int fd = ::shm_open(obj.key().c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::fchown(fd, 65534, 65534), 0) << std::strerror(errno);
    ::close(fd);
  }
  SharedMemoryRegistry registry(nullptr);
  const absl::Status s = holding(registry, "", info("x", obj.key(), 0, kPage)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("belongs to uid 65534, the server runs as uid 0"));
  EXPECT_THAT(s.message(), HasSubstr("--shared_memory_allow_other_uids"));
  registry.set_allow_other_uids(true);
  EXPECT_TRUE(holding(registry, "", info("x", obj.key(), 0, kPage)).ok());
}

TEST(SharedMemoryRegionsDeathTest, FaultOutsideEveryGuardedRangeKeepsTheDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ShmObject guarded(kPage);
  SharedMemoryRegistry registry(nullptr);
  ASSERT_TRUE(holding(registry, "", info("g", guarded.key(), 0, kPage)).ok());  // handler installed
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
