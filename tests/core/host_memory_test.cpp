// The memory --cache ram may count on: /proc/meminfo's MemAvailable and MemTotal, capped by a cgroup limit.
// Hand-made file texts.
#include <gtest/gtest.h>

#include "kestrel/core/host_memory.h"

namespace kestrel::core {
namespace {

const char* kMeminfo =
    "MemTotal:       16384000 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:   10240000 kB\n"
    "Buffers:          100000 kB\n";

TEST(HostMemory, MeminfoInKibibytes) {
  const HostMemory m = parse_host_memory(kMeminfo, {});
  EXPECT_EQ(m.total, 16384000ull * 1024);
  EXPECT_EQ(m.available, 10240000ull * 1024);
}

TEST(HostMemory, CgroupLimitCapsBoth) {
  // v2: a 4 GiB limit with 1 GiB in use leaves 3 GiB.
  HostMemory m = parse_host_memory(kMeminfo, {"4294967296\n", "1073741824\n", ""});
  EXPECT_EQ(m.total, 4294967296ull);
  EXPECT_EQ(m.available, 3221225472ull);
  // No limit: v2's "max", v1's huge number.
  EXPECT_EQ(parse_host_memory(kMeminfo, {"max\n", "123\n", ""}).available, 10240000ull * 1024);
  EXPECT_EQ(parse_host_memory(kMeminfo, {"9223372036854771712\n", "123\n", ""}).total, 16384000ull * 1024);
  // Usage over the limit leaves nothing.
  EXPECT_EQ(parse_host_memory(kMeminfo, {"1000\n", "2000\n", ""}).available, 0u);
}

// The group's page cache that the kernel can drop is not counted as used: 3 of the 4 GiB in use are
// inactive file pages (v2 "inactive_file", v1 "total_inactive_file"), so 3 GiB are available.
TEST(HostMemory, ReclaimablePageCacheIsNotUsed) {
  const std::string v2_stat = "anon 1000\nfile 3221225472\ninactive_file 3221225472\nactive_file 0\n";
  EXPECT_EQ(parse_host_memory(kMeminfo, {"4294967296", "4294967296", v2_stat}).available, 3221225472ull);
  const std::string v1_stat = "cache 3221225472\ninactive_file 5\ntotal_inactive_file 3221225472\n";
  EXPECT_EQ(parse_host_memory(kMeminfo, {"4294967296", "4294967296", v1_stat}).available, 3221225472ull);
}

// Kernels before 3.14 have no MemAvailable: MemFree + Buffers + Cached.
TEST(HostMemory, WithoutMemAvailableFreePlusCache) {
  const HostMemory m = parse_host_memory("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\n", {});
  EXPECT_EQ(m.available, 420ull * 1024);
}

TEST(HostMemory, UnreadableMeminfoIsZeros) {
  const HostMemory m = parse_host_memory("", {});
  EXPECT_EQ(m.total, 0u);
  EXPECT_EQ(m.available, 0u);
  EXPECT_EQ(parse_host_memory("MemTotal: lots\n", {}).total, 0u);
}

TEST(HostMemory, ThisMachine) {
  const HostMemory m = host_memory();
  EXPECT_GT(m.total, 0u);
  EXPECT_GT(m.available, 0u);
  EXPECT_LE(m.available, m.total);
}

}  // namespace
}  // namespace kestrel::core
