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

// A cgroup v2 byte count ("max" or unreadable: no limit).
bool cgroup_bytes(const std::string& text, uint64_t& bytes) {
  std::istringstream in(text);
  return static_cast<bool>(in >> bytes);
}

}  // namespace

HostMemory parse_host_memory(const std::string& meminfo, const std::string& cgroup_max, const std::string& cgroup_current) {
  HostMemory m{meminfo_bytes(meminfo, "MemAvailable"), meminfo_bytes(meminfo, "MemTotal")};
  uint64_t limit = 0, used = 0;
  if (cgroup_bytes(cgroup_max, limit)) {
    m.total = std::min(m.total, limit);
    if (!cgroup_bytes(cgroup_current, used)) used = 0;
    m.available = std::min(m.available, limit > used ? limit - used : 0);
  }
  return m;
}

HostMemory host_memory() {
  // The process's memory cgroup: v2 ("0::/path", files memory.max and memory.current) or v1
  // ("N:memory:/path", memory.limit_in_bytes and memory.usage_in_bytes; "no limit" is a huge number).
  const std::string groups = read_text("/proc/self/cgroup");
  std::istringstream lines(groups);
  std::string line, limit, usage;
  while (std::getline(lines, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    const std::string rel = path == "/" ? "" : path;
    if (controllers.empty() && limit.empty()) {
      limit = read_text("/sys/fs/cgroup" + rel + "/memory.max");
      usage = read_text("/sys/fs/cgroup" + rel + "/memory.current");
    } else if (controllers == "memory") {
      limit = read_text("/sys/fs/cgroup/memory" + rel + "/memory.limit_in_bytes");
      usage = read_text("/sys/fs/cgroup/memory" + rel + "/memory.usage_in_bytes");
    }
  }
  return parse_host_memory(read_text("/proc/meminfo"), limit, usage);
}

}  // namespace kestrel::core
