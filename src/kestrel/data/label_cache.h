// The label cache, <label folder>.kestrel.cache (e.g. labels/train2017.kestrel.cache): each image's
// verification outcome, with the size and modification time of the image and label file it came from.
// An entry is reused while both files are unchanged, so one changed file re-verifies one sample, not the
// split (upstream re-scans the whole split). Named apart from upstream's pickled labels/*.cache.
//
// File (binary, this machine's byte order; any other version or byte order is ignored and rebuilt):
//   "KSTLIDX\0" | u32 version | u32 byte-order mark | i32 nc | u8 plugin | u64 entry count | entries | u64 checksum
//   entry: str image path | image stamp | label stamp | u8 kept
//          kept:    i32 width | i32 height | i32 duplicates | u8 label missing | str warning | u32 rows | rows
//          skipped: str reason
//   stamp: i64 size (-1: no such file) | i64 modification time (ns);  str: u32 length | bytes
//   row: f32 class, cx, cy, w, h | u32 polygon values | f32 values
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "kestrel/core/file_stamp.h"
#include "kestrel/data/dataset_index.h"

namespace kestrel::data {

// One image's verification outcome.
struct SampleCheck {
  bool ok = false;              // kept (record) or skipped (problem)
  ImageRecord record;           // image, label path, size, rows
  std::string problem, warning;
  int duplicates = 0;
  bool label_missing = false;
  bool needs_plugin = false;    // the image is decoded by the OpenCV plugin (not JPEG or PNG, or a CMYK JPEG): the
                                // outcome holds only under the same plugin state
  bool passing = false;         // skipped for a passing cause (a file that could not be read: permissions, I/O;
                                // memory): not cached, verified again next time; never stored in the cache file
};

struct CacheEntry {
  FileStamp image, label;       // as they were before the files were read
  SampleCheck check;
};

// Whether the OpenCV plugin decoded the images other than JPEG and PNG: entries of such images are
// reused only under the same answer. kUnknown: the split had none.
enum class PluginState : uint8_t { kUnknown = 0, kLoaded = 1, kMissing = 2 };

struct LabelCache {
  int nc = 0;
  PluginState plugin = PluginState::kUnknown;
  std::map<std::string, CacheEntry> entries;  // by image path (any bytes: paths need not be UTF-8)
};

// Throws kestrel::Error ("truncated", "checksum mismatch", "corrupt ...") for a damaged file or values
// that verification could not have produced: classes outside 0..nc-1, coordinates outside 0..1, images
// under 10 pixels, polygons of fewer than 3 points, an image listed twice.
LabelCache decode_label_cache(const std::string& bytes);
std::string encode_label_cache(const LabelCache& cache);

// The checksum that ends the file, over all bytes before it (exposed for the fuzz harness).
uint64_t label_cache_checksum(const char* data, size_t size);

}  // namespace kestrel::data
