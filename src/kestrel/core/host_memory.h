// How much memory this machine (or the container's memory limit) has for kestrel: what --cache ram
// checks before it promises to keep a dataset's images in memory.
#pragma once
#include <cstdint>
#include <string>

namespace kestrel::core {

struct HostMemory {
  uint64_t available = 0;  // bytes that can be allocated without swapping (MemAvailable)
  uint64_t total = 0;      // bytes of memory (MemTotal)
};

// /proc/meminfo's MemAvailable (free plus page cache on kernels without it) and MemTotal, each capped by
// the process's cgroup memory limit when it has one: the limit minus the group's working set (its usage
// less the inactive file pages the kernel can drop), as docker and the kubelet count it. cgroup v2
// (memory.max, memory.current) or v1 (memory.limit_in_bytes, memory.usage_in_bytes). Zeros when
// /proc/meminfo cannot be read.
HostMemory host_memory();

// The texts of a memory cgroup's files; an empty limit, or "max", means no limit.
struct CgroupMemoryFiles {
  std::string limit, usage, stat;  // memory.max / limit_in_bytes, memory.current / usage_in_bytes, memory.stat
};
// host_memory() from the files' texts, so that tests can give hand-made ones.
HostMemory parse_host_memory(const std::string& meminfo, const CgroupMemoryFiles& cgroup);

}  // namespace kestrel::core
