#include "kestrel/core/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace kestrel::core {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return in ? out.str() : std::string();
}

// "MemAvailable:   12345 kB" -> bytes; 0 when the key is missing.
uint64_t meminfo_bytes(const std::string& meminfo, const std::string& key) {
  std::istringstream lines(meminfo);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    uint64_t kib = 0;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB") return kib * 1024;
    return 0;
  }
  return 0;
}

// A cgroup byte count ("max" or unreadable: no limit).
bool cgroup_bytes(const std::string& text, uint64_t& bytes) {
  std::istringstream in(text);
  return static_cast<bool>(in >> bytes);
}

// A "key value" line of a cgroup's memory.stat; 0 when missing.
uint64_t stat_value(const std::string& stat, const std::string& key) {
  std::istringstream lines(stat);
  std::string name;
  uint64_t value = 0;
  while (lines >> name >> value)
    if (name == key) return value;
  return 0;
}

}  // namespace

HostMemory parse_host_memory(const std::string& meminfo, const CgroupMemoryFiles& cgroup) {
  HostMemory m{meminfo_bytes(meminfo, "MemAvailable"), meminfo_bytes(meminfo, "MemTotal")};
  if (m.available == 0)  // kernels before 3.14 have no MemAvailable: free plus page cache
    m.available = meminfo_bytes(meminfo, "MemFree") + meminfo_bytes(meminfo, "Buffers") + meminfo_bytes(meminfo, "Cached");
  uint64_t limit = 0, used = 0;
  if (cgroup_bytes(cgroup.limit, limit)) {
    m.total = std::min(m.total, limit);
    if (!cgroup_bytes(cgroup.usage, used)) used = 0;
    // The usage counts page cache the kernel can drop (the images just verified, say): the working set
    // leaves out inactive file pages, as docker and the kubelet count it.
    const uint64_t reclaimable = std::max(stat_value(cgroup.stat, "inactive_file"), stat_value(cgroup.stat, "total_inactive_file"));
    used -= std::min(used, reclaimable);
    m.available = std::min(m.available, limit > used ? limit - used : 0);
  }
  return m;
}

HostMemory host_memory() {
  // The process's memory cgroup: v2 ("0::/path": memory.max, memory.current, memory.stat) or v1
  // ("N:memory:/path": memory.limit_in_bytes, memory.usage_in_bytes, memory.stat; "no limit" is a huge
  // number). In a container without a cgroup namespace the path names the host's view while the
  // container's own group is mounted at the root: the root is the fallback.
  const auto files = [](const std::string& mount, const std::string& rel, const char* limit, const char* usage) {
    for (const std::string& dir : {mount + rel, mount}) {
      CgroupMemoryFiles f{read_text(dir + "/" + limit), read_text(dir + "/" + usage), read_text(dir + "/memory.stat")};
      if (!f.limit.empty()) return f;
    }
    return CgroupMemoryFiles{};
  };
  std::istringstream lines(read_text("/proc/self/cgroup"));
  std::string line;
  CgroupMemoryFiles cgroup;
  while (std::getline(lines, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    const std::string rel = path == "/" ? "" : path;
    if (controllers == "memory") cgroup = files("/sys/fs/cgroup/memory", rel, "memory.limit_in_bytes", "memory.usage_in_bytes");
    else if (controllers.empty() && cgroup.limit.empty()) cgroup = files("/sys/fs/cgroup", rel, "memory.max", "memory.current");
  }
  return parse_host_memory(read_text("/proc/meminfo"), cgroup);
}

}  // namespace kestrel::core
