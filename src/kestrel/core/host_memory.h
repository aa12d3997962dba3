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

// /proc/meminfo's MemAvailable and MemTotal, each capped by the process's cgroup memory limit when it has
// one (v2 memory.max minus memory.current, or v1 memory.limit_in_bytes minus memory.usage_in_bytes).
// Zeros when /proc/meminfo cannot be read.
HostMemory host_memory();

// The same from the texts of /proc/meminfo and of the cgroup's limit and usage files ("" or "max" for the
// limit when there is none). Parsed separately so that tests can give hand-made texts.
HostMemory parse_host_memory(const std::string& meminfo, const std::string& cgroup_max, const std::string& cgroup_current);

}  // namespace kestrel::core
