#include "kestrel/data/label_cache.h"

#include <sys/stat.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kestrel/core/error.h"
#include "kestrel/data/image_files.h"

namespace kestrel::data {
namespace {

constexpr char kMagic[8] = {'K', 'S', 'T', 'L', 'I', 'D', 'X', '\0'};
// 6: images of formats upstream's dataset check refuses (a PPM named .jpg) are skipped; 5: an entry's flags say whether its image needed the OpenCV plugin (CMYK JPEGs), and its verdicts are those
// of polygon labels checked through their box and duplicates found by box; 4: binary, one entry per image with
// its files' stamps (3 and before: one JSON document for the split).
constexpr uint32_t kVersion = 6;
constexpr uint32_t kByteOrderMark = 0x01020304;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_string(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    out += s;
  }
  std::string out;
};

class Reader {
 public:
  Reader(const char* p, const char* end) : p_(p), end_(end) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  void need(size_t n) const {
    if (left() < n) fail("truncated");
  }

 private:
  const char *p_, *end_;
};

void put_stamp(Writer& w, const FileStamp& s) {
  w.put(s.size);
  w.put(s.mtime_ns);
}

FileStamp get_stamp(Reader& r) {
  FileStamp s;
  s.size = r.get<int64_t>();
  s.mtime_ns = r.get<int64_t>();
  if (s.size < -1) fail("corrupt file size");
  return s;
}

float get_coordinate(Reader& r) {
  const float v = r.get<float>();
  if (!(v >= 0.f && v <= 1.f)) fail("corrupt label coordinate");
  return v;
}

LabelRow get_row(Reader& r, int nc) {
  LabelRow row;
  const float cls = r.get<float>();
  if (!(cls >= 0.f && cls == std::floor(cls) && cls < static_cast<float>(nc > 0 ? nc : kMaxClassIndex + 1))) fail("corrupt class");
  row.box[0] = cls;
  for (int i = 1; i < 5; ++i) row.box[i] = get_coordinate(r);
  const uint32_t n = r.get<uint32_t>();
  if (n != 0 && (n < 6 || n % 2 != 0)) fail("corrupt polygon");
  r.need(static_cast<size_t>(n) * sizeof(float));
  row.polygon.resize(n);
  // A polygon's points may lie a little outside 0..1 (labels.h checks a polygon through its box, as upstream).
  for (auto& v : row.polygon) {
    v = r.get<float>();
    if (!std::isfinite(v)) fail("corrupt polygon coordinate");
  }
  return row;
}

}  // namespace

uint64_t label_cache_checksum(const char* data, size_t size) {
  // 8 bytes at a time (a COCO cache is tens of MB), each word multiplied in and rotated: any change of a
  // byte changes the sum; the length is mixed in last.
  uint64_t h = 0x84222325cbf29ce4ull;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ (w * 0x9e3779b97f4a7c15ull));
    h = ((h << 27) | (h >> 37)) * 0x100000001b3ull;
  }
  for (; i < size; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 0x100000001b3ull;
  return (h ^ size) * 0x9e3779b97f4a7c15ull;
}

std::string encode_label_cache(const LabelCache& cache) {
  Writer w;
  w.out.append(kMagic, sizeof kMagic);
  w.put(kVersion);
  w.put(kByteOrderMark);
  w.put(static_cast<int32_t>(cache.nc));
  w.put(static_cast<uint8_t>(cache.plugin));
  w.put(static_cast<uint64_t>(cache.entries.size()));
  for (const auto& [image, e] : cache.entries) {
    w.put_string(image);
    put_stamp(w, e.image);
    put_stamp(w, e.label);
    const SampleCheck& c = e.check;
    w.put(static_cast<uint8_t>((c.ok ? 1 : 0) | (c.needs_plugin ? 2 : 0)));
    if (!c.ok) {
      w.put_string(c.problem);
      continue;
    }
    w.put(static_cast<int32_t>(c.record.width));
    w.put(static_cast<int32_t>(c.record.height));
    w.put(static_cast<int32_t>(c.duplicates));
    w.put(static_cast<uint8_t>(c.label_missing));
    w.put_string(c.warning);
    w.put(static_cast<uint32_t>(c.record.rows.size()));
    for (const auto& row : c.record.rows) {
      for (float v : row.box) w.put(v);
      w.put(static_cast<uint32_t>(row.polygon.size()));
      for (float v : row.polygon) w.put(v);
    }
  }
  w.put(label_cache_checksum(w.out.data(), w.out.size()));
  return std::move(w.out);
}

LabelCache decode_label_cache(const std::string& bytes) {
  constexpr size_t kHeader = sizeof kMagic + 4 + 4 + 4 + 1 + 8;
  if (bytes.size() < kHeader + 8 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    fail("not a kestrel label cache");
  const size_t body = bytes.size() - 8;
  uint64_t checksum;
  std::memcpy(&checksum, bytes.data() + body, 8);
  Reader r(bytes.data() + sizeof kMagic, bytes.data() + body);
  if (r.get<uint32_t>() != kVersion) fail("written by another version of kestrel");
  if (r.get<uint32_t>() != kByteOrderMark) fail("written on a machine of another byte order");
  if (checksum != label_cache_checksum(bytes.data(), body)) fail("checksum mismatch (a damaged file)");
  LabelCache cache;
  cache.nc = r.get<int32_t>();
  if (cache.nc < 0) fail("corrupt class count");
  const uint8_t plugin = r.get<uint8_t>();
  if (plugin > 2) fail("corrupt plugin state");
  cache.plugin = static_cast<PluginState>(plugin);
  const uint64_t n = r.get<uint64_t>();
  if (n > r.left() / 21) fail("corrupt entry count");  // each entry takes at least 21 bytes
  for (uint64_t i = 0; i < n; ++i) {
    std::string image = r.get_string();
    CacheEntry e;
    e.image = get_stamp(r);
    e.label = get_stamp(r);
    SampleCheck& c = e.check;
    const uint8_t flags = r.get<uint8_t>();
    if (flags > 3) fail("corrupt entry");
    c.ok = (flags & 1) != 0;
    c.needs_plugin = (flags & 2) != 0;
    c.record.image = image;
    c.record.label = label_path_for(image);
    if (!c.ok) {
      c.problem = r.get_string();
    } else {
      c.record.width = r.get<int32_t>();
      c.record.height = r.get<int32_t>();
      if (c.record.width < kMinImageSide || c.record.height < kMinImageSide) fail("corrupt image size");
      c.duplicates = r.get<int32_t>();
      if (c.duplicates < 0) fail("corrupt duplicate count");
      const uint8_t missing = r.get<uint8_t>();
      if (missing > 1) fail("corrupt entry");
      c.label_missing = missing == 1;
      c.warning = r.get_string();
      const uint32_t rows = r.get<uint32_t>();
      if (rows > r.left() / 24) fail("corrupt row count");  // each row takes at least 24 bytes
      if (c.label_missing && rows > 0) fail("corrupt entry: rows without a label file");
      c.record.rows.reserve(rows);
      for (uint32_t k = 0; k < rows; ++k) c.record.rows.push_back(get_row(r, cache.nc));
    }
    if (!cache.entries.emplace(std::move(image), std::move(e)).second) fail("corrupt: an image listed twice");
  }
  if (r.left() != 0) fail("corrupt: bytes after the last entry");
  return cache;
}

}  // namespace kestrel::data
