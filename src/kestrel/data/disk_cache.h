// `--cache disk`: decoded and resized images (what the RAM cache holds) kept in a file next to each
// image, so later runs and epochs read raw pixels instead of decoding JPEGs, without holding a
// dataset's pixels in memory. Upstream YOLOv5 saves the decoded, unresized image as <stem>.npy;
// kestrel saves the resized one, so a read needs neither decoding nor resizing.
//
// File: a valid NumPy .npy (version 1.0, dtype uint8, shape (h, w, 3), BGR like cv2.imread), so
// numpy.load reads it, followed by a 48-byte trailer numpy ignores: "KCACHE01", the source image's
// size and modification time (ns), its decoded size (w, h), the resize (img_size, policy) and a 64-bit
// checksum of the pixels. A file whose length, header, trailer or checksum disagree, or whose source
// changed since, is a miss: the caller decodes again and rewrites it. Writes go to a temporary file
// renamed into place, so readers never see half a file.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <opencv2/core.hpp>

#include "kestrel/core/file_stamp.h"

namespace kestrel::data {

// What the cache is made from: the source file's size and modification time (stamp_of_existing).
// How the image was resized: long side img_size, with the training (INTER_LINEAR) or validation
// (INTER_AREA when shrinking) interpolation of resize_long_side.
struct ResizeKey {
  int img_size = 640;
  bool augment = true;
};

struct CachedImage {
  cv::Mat image;      // H x W x 3 uint8 BGR, long side = img_size
  cv::Size original;  // decoded size (w, h) before the resize
};

// <image>.<img_size>.npy for the training resize, <image>.<img_size>-area.npy for the validation one.
std::string disk_cache_path(const std::string& image_path, const ResizeKey& key);

// The cached image, or nullopt if the file is missing, stale (another stamp or key), truncated or corrupt;
// `why` (if given) says which.
std::optional<CachedImage> read_disk_cache(const std::string& cache_path, const FileStamp& stamp, const ResizeKey& key,
                                           std::string* why = nullptr);

// Writes atomically; throws kestrel::Error naming the file if it cannot (e.g. a read-only dataset folder).
void write_disk_cache(const std::string& cache_path, const CachedImage& entry, const FileStamp& stamp,
                      const ResizeKey& key);

}  // namespace kestrel::data
