#include "kestrel/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "kestrel/core/error.h"

namespace kestrel {
namespace {

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The rename is an update of the folder: without this a power cut can lose it although the file's bytes
// are on the disk. Some filesystems refuse fsync on a folder (EINVAL); the file itself is flushed by then.
void flush_folder_of(const std::string& path) {
  std::string folder = std::filesystem::path(path).parent_path().string();
  if (folder.empty()) folder = ".";
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts, Durability durability) {
  // The rename replaces whatever has the name: a device (-o /dev/full), a FIFO or a folder would be swapped
  // for a regular file. Only a missing or regular file is replaced.
  std::error_code ec;
  const std::filesystem::file_status existing = std::filesystem::status(path, ec);
  if (std::filesystem::exists(existing) && !std::filesystem::is_regular_file(existing))
    fail(path, ": exists and is not a regular file (",
         std::filesystem::is_directory(existing) ? "a directory" : "a device, FIFO or socket", "); not replaced");
  // Beside the target (a rename within one folder), named after it; where that name would pass the file-name
  // limit (a target of 225 bytes or more), a short one: each thread writes one file at a time.
  const std::string suffix = cat(".tmp", ::getpid(), "-", std::hash<std::thread::id>{}(std::this_thread::get_id()));
  constexpr size_t kNameMax = 255;  // NAME_MAX of Linux's file systems
  const std::filesystem::path target(path);
  const std::string tmp = target.filename().string().size() + suffix.size() <= kNameMax
                              ? path + suffix
                              : (target.parent_path() / suffix).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);  // the umask applies, as for any new file
  if (fd < 0) fail(path, ": cannot write (", std::strerror(errno), ")");
  auto give_up = [&](const char* what, int error) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, ": ", what, " (", std::strerror(error), ")");
  };
  for (const std::string_view part : parts)
    if (!write_all(fd, part.data(), part.size())) give_up("write failed", errno);
  if (durability == Durability::kFlushed && ::fsync(fd) != 0) give_up("write failed", errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) give_up("write failed", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up("cannot move the new file into place", errno);
  if (durability == Durability::kFlushed) flush_folder_of(path);
}

}  // namespace kestrel
