// A file's size and modification time: what the caches built from a file (the label cache's entries, a
// --cache disk image) compare to know that the file is still the one they were made from.
#pragma once
#include <cstdint>
#include <string>

namespace kestrel {

struct FileStamp {
  int64_t size = -1;  // -1: no such file (or it cannot be stat'ed)
  int64_t mtime_ns = 0;
  bool exists() const { return size >= 0; }
  bool operator==(const FileStamp& o) const { return size == o.size && mtime_ns == o.mtime_ns; }
  bool operator!=(const FileStamp& o) const { return !(*this == o); }
};

// stat(2) of `path`; a missing or unreadable file gives the default stamp (size -1).
FileStamp stamp_of(const std::string& path);
// The same for a file that must be there: throws kestrel::Error "<path>: cannot be read (<reason>)".
FileStamp stamp_of_existing(const std::string& path);

}  // namespace kestrel
