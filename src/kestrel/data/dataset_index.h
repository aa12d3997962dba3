// Verifying a split once: every image decoded, every label file parsed with the reference rules;
// bad samples skipped with a reason, each outcome cached next to the labels (label_cache.h) and reused
// while the image and its label file are unchanged (size and modification time), for any nc (classes are
// checked against it after the cache).
#pragma once
#include <string>
#include <vector>

#include "kestrel/data/labels.h"

namespace kestrel::data {

// Verification skips images with a side below this (upstream: "image size <10 pixels"); the label cache
// refuses entries that say otherwise.
inline constexpr int kMinImageSide = 10;

struct ImageRecord {
  std::string image;
  std::string label;            // the label file (may not exist: a background image)
  int width = 0, height = 0;    // after EXIF orientation
  std::vector<LabelRow> rows;   // normalised boxes (and polygons when every row has one)
};

struct SkippedFile {
  std::string path;
  std::string reason;           // "<file>[:line]: <problem>"
};

struct IndexCounts {
  int images = 0;       // images listed
  int labelled = 0;     // with a non-empty label file
  int missing = 0;      // no label file (kept as background)
  int empty = 0;        // empty label file (kept as background)
  int corrupt = 0;      // skipped
  int duplicates = 0;   // duplicate rows removed
  int boxes = 0;        // rows in usable samples
};

struct DatasetIndex {
  std::vector<ImageRecord> records;   // the usable samples, in image-path order
  std::vector<SkippedFile> skipped;   // corrupt images or labels
  std::vector<std::string> warnings;  // kept samples with something worth saying (duplicates, decoder warnings)
  IndexCounts counts;
  std::string cache_path;             // where the cache was read from or written to ("" if none)
  bool from_cache = false;            // every sample from the cache
  int verified = 0;                   // samples verified this time (the others came from the cache)
  std::string cache_note;             // e.g. "cache not writable: ..."
};

struct IndexOptions {
  int nc = 0;              // classes >= nc are label errors (0 = do not check)
  int workers = 0;         // verification threads (0 = hardware threads)
  bool use_cache = true;
};

// images: the split's image paths (list_images). The cache lives at <label folder>.kestrel.cache
// (e.g. labels/train2017.kestrel.cache), named apart from upstream's pickled labels/*.cache; it is
// rewritten (atomically) when something was verified.
DatasetIndex index_split(const std::vector<std::string>& images, const IndexOptions& options);

// Human-readable report: counts on one line, then every skipped file with its reason (at most `limit`).
std::string describe(const DatasetIndex& index, const std::string& split, size_t limit = 50);

// An error naming `source` (the dataset YAML), the split and its entries when the split has no usable
// sample: nothing listed, or every file skipped (describe() lists why).
void require_usable(const DatasetIndex& index, const std::string& source, const std::string& split,
                    const std::vector<std::string>& entries);

}  // namespace kestrel::data
