#include "kestrel/data/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "kestrel/core/atomic_file.h"
#include "kestrel/core/error.h"

namespace kestrel::data {
namespace {

constexpr char kMagic[] = "\x93NUMPY";       // 6 bytes, then version 1.0 and a little-endian u16 header length
constexpr char kTrailerMagic[8] = {'K', 'C', 'A', 'C', 'H', 'E', '0', '1'};

#pragma pack(push, 1)
struct Trailer {
  char magic[8];
  uint64_t source_size;
  int64_t source_mtime_ns;
  uint32_t original_w, original_h;
  uint32_t img_size, augment;
  uint64_t checksum;
};
#pragma pack(pop)
static_assert(sizeof(Trailer) == 48, "the trailer is 48 bytes on disk");

// The .npy header for an (h, w, 3) uint8 array: the dict, spaces and '\n', so that magic + version +
// length + header is a multiple of 64 bytes (the format's alignment).
std::string npy_header(int h, int w) {
  std::string dict = cat("{'descr': '|u1', 'fortran_order': False, 'shape': (", h, ", ", w, ", 3), }");
  const size_t unpadded = 6 + 2 + 2 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out(kMagic, 6);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

// 64-bit multiply-xor hash over 8-byte words in four independent lanes (so the multiplies overlap),
// then the tail bytes: catches flipped or zeroed pixels at close to memory speed.
uint64_t checksum(const uint8_t* p, size_t n) {
  constexpr uint64_t kPrime = 0x100000001B3ull;
  uint64_t lane[4] = {0x9E3779B97F4A7C15ull ^ n, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = (lane[k] ^ w) * kPrime;
      lane[k] ^= lane[k] >> 29;
    }
  uint64_t h = lane[0];
  for (int k = 1; k < 4; ++k) h = (h ^ lane[k]) * kPrime;
  for (; i < n; ++i) h = (h ^ p[i]) * kPrime;
  return h;
}

bool read_exact(int fd, void* out, size_t n, off_t at) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, at);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return false;
    }
    p += got, n -= static_cast<size_t>(got), at += got;
  }
  return true;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::optional<CachedImage> miss(std::string* why, const std::string& reason) {
  if (why) *why = reason;
  return std::nullopt;
}

}  // namespace

std::string disk_cache_path(const std::string& image_path, const ResizeKey& key) {
  return cat(image_path, ".", key.img_size, key.augment ? "" : "-area", ".npy");
}

std::optional<CachedImage> read_disk_cache(const std::string& cache_path, const FileStamp& stamp, const ResizeKey& key,
                                           std::string* why) {
  // O_NONBLOCK: a FIFO in the cache's place would block open() until something wrote to it (a hang of the
  // loader's threads); anything but a regular file is a miss (which the write then names: it replaces
  // only regular files).
  Fd file{::open(cache_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) return miss(why, "missing");
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) return miss(why, "cannot stat");
  if (!S_ISREG(st.st_mode)) return miss(why, "not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);

  // Header: the file's own shape, checked by rebuilding the exact header kestrel writes for it.
  char prefix[10];
  if (file_size < sizeof prefix + sizeof(Trailer) || !read_exact(file.fd, prefix, sizeof prefix, 0))
    return miss(why, "truncated header");
  if (std::memcmp(prefix, kMagic, 6) != 0 || prefix[6] != 1 || prefix[7] != 0) return miss(why, "not a .npy 1.0 file");
  const size_t header_len = static_cast<uint8_t>(prefix[8]) | static_cast<size_t>(static_cast<uint8_t>(prefix[9])) << 8;
  if (sizeof prefix + header_len + sizeof(Trailer) > file_size) return miss(why, "truncated header");
  std::string header(sizeof prefix + header_len, '\0');
  if (!read_exact(file.fd, header.data(), header.size(), 0)) return miss(why, "truncated header");
  int h = 0, w = 0;
  if (std::sscanf(header.c_str() + sizeof prefix, "{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d, 3), }", &h,
                  &w) != 2 ||
      h <= 0 || w <= 0 || header != npy_header(h, w))
    return miss(why, "unexpected .npy header");
  const uint64_t pixels = static_cast<uint64_t>(h) * static_cast<uint64_t>(w) * 3;
  if (file_size != header.size() + pixels + sizeof(Trailer)) return miss(why, "wrong length (truncated or appended)");

  Trailer t{};
  if (!read_exact(file.fd, &t, sizeof t, static_cast<off_t>(header.size() + pixels))) return miss(why, "truncated trailer");
  if (std::memcmp(t.magic, kTrailerMagic, sizeof kTrailerMagic) != 0) return miss(why, "no kestrel trailer");
  if (t.source_size != static_cast<uint64_t>(stamp.size) || t.source_mtime_ns != stamp.mtime_ns) return miss(why, "source image changed");
  if (t.img_size != static_cast<uint32_t>(key.img_size) || t.augment != static_cast<uint32_t>(key.augment))
    return miss(why, "made for another image size");
  // The checksum covers the pixels only: a damaged original size above INT_MAX became a negative cv::Size.
  constexpr uint32_t kMaxSide = std::numeric_limits<int>::max();
  if (std::max(h, w) != key.img_size || t.original_w == 0 || t.original_h == 0 || t.original_w > kMaxSide ||
      t.original_h > kMaxSide)
    return miss(why, "inconsistent sizes");

  CachedImage out;
  out.image.create(h, w, CV_8UC3);
  if (!read_exact(file.fd, out.image.data, pixels, static_cast<off_t>(header.size()))) return miss(why, "truncated pixels");
  if (checksum(out.image.data, pixels) != t.checksum) return miss(why, "checksum mismatch (corrupt pixels)");
  out.original = cv::Size(static_cast<int>(t.original_w), static_cast<int>(t.original_h));
  return out;
}

void write_disk_cache(const std::string& cache_path, const CachedImage& entry, const FileStamp& stamp,
                      const ResizeKey& key) {
  if (entry.image.type() != CV_8UC3 || entry.image.empty()) fail(cache_path, ": the disk cache holds 8-bit BGR images");
  const cv::Mat img = entry.image.isContinuous() ? entry.image : entry.image.clone();
  const size_t pixels = img.total() * 3;
  Trailer t{};
  std::memcpy(t.magic, kTrailerMagic, sizeof kTrailerMagic);
  t.source_size = static_cast<uint64_t>(stamp.size);
  t.source_mtime_ns = stamp.mtime_ns;
  t.original_w = static_cast<uint32_t>(entry.original.width);
  t.original_h = static_cast<uint32_t>(entry.original.height);
  t.img_size = static_cast<uint32_t>(key.img_size);
  t.augment = key.augment;
  t.checksum = checksum(img.data, pixels);
  const std::string header = npy_header(img.rows, img.cols);

  // write_file_atomic names its temporary file per process and thread: two threads (or ranks) filling the
  // same entry each rename a whole file.
  try {
    write_file_atomic(cache_path,
                      {header, {reinterpret_cast<const char*>(img.data), pixels}, {reinterpret_cast<const char*>(&t), sizeof t}},
                      Durability::kRename);
  } catch (const Error& e) {
    fail("cannot write the disk image cache: ", e.what(), "; use --cache ram, or no cache, for a read-only dataset");
  }
}

}  // namespace kestrel::data
