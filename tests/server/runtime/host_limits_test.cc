// Host limits: the cgroup v1/v2 CPU quota and memory limit parsers, the lookup through
// /proc/self/cgroup into a fake /sys/fs/cgroup tree (innermost limit wins, parents count), and
// the memory budget's default and clamp.
#include "server/runtime/host_limits.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace matserve::server {
namespace {

namespace fs = std::filesystem;

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  return CPU_COUNT(&set);
}

class FakeRoot {
 public:
  FakeRoot() {
    char dir[] = "/tmp/matserve_host_limits_XXXXXX";
    root_ = mkdtemp(dir);
  }
  ~FakeRoot() { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& text) {
    const fs::path p = fs::path(root_) / path.substr(1);
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

TEST(HostLimitsTest, ParsesCgroupV2CpuMax) {
  EXPECT_EQ(parse_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_DOUBLE_EQ(*parse_cpu_max("250000 100000\n"), 2.5);
  EXPECT_EQ(parse_cpu_max("garbage"), std::nullopt);
  EXPECT_EQ(parse_cpu_max("0 100000"), std::nullopt);
}

TEST(HostLimitsTest, ParsesCgroupV1CfsQuota) {
  EXPECT_EQ(parse_cfs_quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_DOUBLE_EQ(*parse_cfs_quota("800000\n", "100000\n"), 8.0);
}

TEST(HostLimitsTest, ParsesMemoryLimits) {
  EXPECT_EQ(parse_memory_limit("max\n"), std::nullopt);
  EXPECT_EQ(parse_memory_limit("9223372036854771712\n"), std::nullopt);  // v1 "no limit"
  EXPECT_EQ(parse_memory_limit("34359738368\n"), std::int64_t{32} << 30);
}

TEST(HostLimitsTest, CgroupV2QuotaOfTheProcessOrAParentLimitsTheCpus) {
  FakeRoot r;
  r.write("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  r.write("/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  r.write("/sys/fs/cgroup/kubepods/pod1/cpu.max", "100000 100000\n");  // the pod: 1 CPU
  r.write("/sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "1073741824\n");
  const HostLimits h = read_host_limits(r.root());
  ASSERT_TRUE(h.cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(*h.cpu_quota, 1.0);
  EXPECT_EQ(h.cpus, 1);
  EXPECT_EQ(h.memory_bytes, std::int64_t{1} << 30);
  EXPECT_TRUE(h.memory_limited_by_cgroup);
}

TEST(HostLimitsTest, CgroupV1QuotaRoundsUpAndNeverExceedsTheAffinity) {
  FakeRoot r;
  r.write("/proc/self/cgroup", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n");
  r.write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
  r.write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  const HostLimits h = read_host_limits(r.root());
  ASSERT_TRUE(h.cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(*h.cpu_quota, 1.5);
  EXPECT_EQ(h.cpus, std::min(2, affinity_cpus()));
  EXPECT_FALSE(h.memory_limited_by_cgroup);
  EXPECT_GT(h.memory_bytes, 0);
}

TEST(HostLimitsTest, NoCgroupFilesMeansTheAffinityAndPhysicalMemory) {
  FakeRoot r;
  const HostLimits h = read_host_limits(r.root());
  EXPECT_FALSE(h.cpu_quota.has_value());
  EXPECT_EQ(h.cpus, affinity_cpus());
  EXPECT_FALSE(h.memory_limited_by_cgroup);
}

TEST(HostLimitsTest, MemoryBudgetDefaultsToAShareAndClampsLargerRequests) {
  const std::int64_t gib = std::int64_t{1} << 30;
  EXPECT_EQ(choose_memory_budget(0, 80 * gib, 0.9, 0.9).bytes, 72 * gib);
  EXPECT_FALSE(choose_memory_budget(0, 80 * gib, 0.9, 0.9).clamped);
  EXPECT_EQ(choose_memory_budget(64 * gib, 80 * gib, 0.9, 0.9).bytes, 64 * gib);
  const MemoryBudget big = choose_memory_budget(64 * gib, 40 * gib, 0.9, 0.9);  // a 40 GB GPU
  EXPECT_TRUE(big.clamped);
  EXPECT_EQ(big.bytes, 36 * gib);
}

}  // namespace
}  // namespace matserve::server
