#include "kestrel/core/file_stamp.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "kestrel/core/error.h"

namespace kestrel {
namespace {

FileStamp from_stat(const struct stat& st) {
  return {static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

}  // namespace

FileStamp stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return from_stat(st);
}

FileStamp stamp_of_existing(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, ": cannot be read (", std::strerror(errno), ")");
  return from_stat(st);
}

}  // namespace kestrel
